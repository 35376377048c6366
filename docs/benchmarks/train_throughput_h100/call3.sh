# Training throughput, GPU call 3 (one H100): benchmarks/train_throughput.py at bf16 and TF32 with the cuDNN
# attention core and torch.compile reduce-overhead (max-autotune-no-cudagraphs left out: its
# autotuning outlasted call 2's limit). Code: commit ddc91bc.
set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site:$ROOT/.whl/site
R=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $R/summary3.txt
timeout 540 python3 -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
  --config.steps=100 --config.precisions="('bfloat16','default')" --config.jax_loops="('async',)" \
  --config.jax_attention="('xla','dot_product')" --config.torch_modes="('eager','default','reduce-overhead')" \
  --workdir=$R > $R/bench3.log 2>&1; echo "bench rc=$?" >> $R/summary3.txt
