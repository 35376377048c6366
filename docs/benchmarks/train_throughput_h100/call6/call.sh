# Training throughput, GPU call 6 (one H100): where the training step's time goes (profiler traces), K steps
# per dispatch (the benchmark's 'scanK' loop), and the peer's torch.compile modes, in one call.
# Run with the `run` tool from the repository root, carry [".whl"], kind nvidia-h100-x1:
#   bash docs/benchmarks/train_throughput_h100/call6/call.sh
set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site:$ROOT/.whl/site
R=$OUT; S=$R/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S; python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)" >> $S
for spec in "default xla 1" "bfloat16 dot_product 1" "bfloat16 dot_product 8" "default xla 8"; do
  set -- $spec
  timeout 120 python3 -m benchmarks.profiling.trace_train --precision=$1 --attention=$2 --per_call=$3 \
    --repeats=24 --json=$R/trace_$1_$2_$3.json > /tmp/t.log 2>&1; echo "trace $spec rc=$?" >> $S
  cat /tmp/t.log >> $R/traces.log; grep -v "^ *[0-9a-z_]*[._]" /tmp/t.log | head -12 >> $S
done
timeout 330 python3 -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
  --config.steps=96 --config.warmup_steps=24 --config.precisions="('bfloat16','default')" \
  --config.jax_loops="('async','scan8')" --config.jax_attention="('xla','dot_product')" \
  --config.torch_modes="('default','reduce-overhead')" --workdir=$R > $R/bench.log 2>&1
echo "bench rc=$?" >> $S; grep tokens/s $R/bench.log >> $S
