# Training throughput, GPU call 7 (one H100): the step's largest kernels named by their JAX operation (HLO
# dump), and the peer's third torch.compile mode, max-autotune-no-cudagraphs (its autotuning
# outlasted call 2's limit; here it has a call of its own).
# Run with the `run` tool from the repository root, carry [".whl"], kind nvidia-h100-x1:
#   bash docs/benchmarks/train_throughput_h100/call7/call.sh
set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site:$ROOT/.whl/site
R=$OUT; S=$R/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
for spec in "bfloat16 dot_product" "default xla"; do
  set -- $spec; rm -rf /tmp/hlo
  XLA_FLAGS="--xla_dump_to=/tmp/hlo --xla_dump_hlo_as_text" timeout 120 python3 -m benchmarks.profiling.trace_train \
    --precision=$1 --attention=$2 --repeats=24 --top=30 --hlo_dir=/tmp/hlo --json=$R/trace_hlo_$1.json > /tmp/t.log 2>&1
  echo "trace $spec rc=$?" >> $S; grep -v "^I1\|^W1" /tmp/t.log >> $S
done
timeout 400 python3 -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
  --config.steps=96 --config.warmup_steps=24 --config.precisions="('bfloat16','default')" \
  --config.jax_loops="('async',)" --config.jax_attention="('dot_product','xla')" \
  --config.torch_modes="('max-autotune-no-cudagraphs',)" --workdir=$R > $R/bench.log 2>&1
echo "bench rc=$?" >> $S; grep tokens/s $R/bench.log >> $S
