# Training throughput: how closely bf16 mixed precision, vmapped seeds and 2 host devices track the plain
# float32 run of train_clm.py:smoke on the CPU, in the environment of the tests (tests/conftest.py).
# Run from the repository root; writes agreement.json (and agreement.log).
set -u; R=docs/benchmarks/train_throughput_cpu
XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_DISABLE_MOST_OPTIMIZATIONS=1 \
  .venv/bin/python -m benchmarks.train_agreement $R/agreement.json > $R/agreement.log 2>&1
echo "rc=$?" >> $R/agreement.log
