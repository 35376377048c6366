"""Benchmarks against PyTorch peers, profilers and kernel experiments.

Run each as a module from the repository root: `python -m benchmarks.NAME`."""
