"""Benchmarks: the bias sweep against PyTorch peers (`benchmark.py`) and whole-process timers
(`process_time.py` with its PyTorch peer `torch_loop_process.py`) at the top; the profilers in
`profiling/`.

Run each as a module from the repository root: `python -m benchmarks.NAME`,
`python -m benchmarks.profiling.NAME`."""
