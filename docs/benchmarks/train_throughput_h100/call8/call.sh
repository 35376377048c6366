# Training throughput, GPU call 8 (two H100s of one host): data parallel, 1 GPU against 2 at equal work per
# card (global batch 64 on one, 128 on two), TF32 (XLA core) and bf16 (cuDNN core).
# Run with the `run` tool from the repository root, carry [".whl"], kind nvidia-h100-x2:
#   bash docs/benchmarks/train_throughput_h100/call8/call.sh
set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site:$ROOT/.whl/site
R=$OUT; S=$R/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
B="--config.steps=96 --config.warmup_steps=24 --config.precisions=('default','bfloat16') --config.jax_loops=('async',) --config.jax_attention=('xla','dot_product') --config.torch_modes=()"
for n in 1 2; do mkdir -p /tmp/dev$n
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n-1))) timeout 200 python3 -m benchmarks.train_throughput \
    --config=benchmarks/configs/train_throughput.py $B --config.batch_size=$((64*n)) --workdir=/tmp/dev$n \
    > $R/devices${n}.log 2>&1; echo "devices=$n rc=$?" >> $S
  cp /tmp/dev$n/train_throughput.json $R/train_throughput_${n}gpu.json; done
python3 - >> $S <<'PY'
import json, os
R = os.environ["OUT"]
one, two = (json.load(open(f"{R}/train_throughput_{n}gpu.json")) for n in (1, 2))
for p, rows in one["precisions"].items():
    for name, row in rows["variants"].items():
        r2 = two["precisions"][p]["variants"].get(name, {})
        if "tokens_per_s" in row and "tokens_per_s" in r2:
            print(f"{p} {name}: 1 GPU {row['tokens_per_s']:,.0f}, 2 GPUs {r2['tokens_per_s']:,.0f} tokens/s, "
                  f"{r2['tokens_per_s'] / row['tokens_per_s']:.2f}x (target >= 1.9)")
PY
