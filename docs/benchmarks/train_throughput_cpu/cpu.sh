# Training throughput, the 2-core CPU check: train_clm.py:small, the training loop's step against the eager
# PyTorch peer (benchmarks/train_torch.py), float32, one process. Run from the repository root;
# writes train_throughput.json (wall and process CPU time per step, best of 3 runs of 50 steps) and
# the load average before and after (load_cpu.txt).
set -u; R=docs/benchmarks/train_throughput_cpu
{ date -u; nproc; grep -m1 "model name" /proc/cpuinfo; uptime; } > $R/load_cpu.txt
.venv/bin/python -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py:cpu \
  --config.steps=50 --config.repeats=3 --workdir=$R > $R/bench_cpu.log 2>&1; echo "bench rc=$?" >> $R/load_cpu.txt
{ date -u; uptime; } >> $R/load_cpu.txt
