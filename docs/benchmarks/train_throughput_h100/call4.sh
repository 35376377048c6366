# Training throughput, GPU call 4 (NOT RUN YET; for the lead): the two scaling targets, on a machine of kind
# nvidia-h100-x2 (two H100s of one host). Code: the commit that adds this file or later.
#   1. 5 seeds vmapped (training.train_seeds, experiments/train_seeds.py's path) finish in <= 2x the
#      wall time of one seed, train_clm.py:gpu size (TF32), 1,000 steps from scratch, one card.
#   2. 2 GPUs >= 1.9x the tokens/s of one: the training loop's step at 64 sequences per card
#      (global batch 64 on one card, 128 on two: equal work per card), TF32 and bf16.
# Run with the `run` tool from the repository root, carry [".whl"], kind nvidia-h100-x2:
#   bash docs/benchmarks/train_throughput_h100/call4.sh
set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site:$ROOT/.whl/site
R=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $R/summary4.txt; git log -1 --format=%H >> $R/summary4.txt 2>/dev/null
CUDA_VISIBLE_DEVICES=0 timeout 300 python3 -m benchmarks.train_seeds_time --variant=gpu --steps=1000 \
  --seeds=1,5 --out=/tmp/seeds > $R/seeds4.log 2>&1; echo "seeds rc=$?" >> $R/summary4.txt
cp /tmp/seeds/train_seeds_time.json $R/train_seeds_time_call4.json
B="--config.steps=100 --config.precisions=('default','bfloat16') --config.jax_loops=('async',) --config.jax_attention=('xla','dot_product') --config.torch_modes=()"
for n in 1 2; do mkdir -p /tmp/dev$n
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n-1))) timeout 130 python3 -m benchmarks.train_throughput \
    --config=benchmarks/configs/train_throughput.py $B --config.batch_size=$((64*n)) --workdir=/tmp/dev$n \
    > $R/devices${n}_call4.log 2>&1; echo "devices=$n rc=$?" >> $R/summary4.txt
  cp /tmp/dev$n/train_throughput.json $R/train_throughput_${n}gpu_call4.json; done
python3 - >> $R/summary4.txt <<'PY'
import json, os
R = os.environ["OUT"]
s = json.load(open(f"{R}/train_seeds_time_call4.json"))
for row in s["rows"]:
    print(f"seeds S={row['num_seeds']}: wall {row['wall_s']:.1f} s, {row['wall_over_first']:.2f}x S=1 (target <= 2)")
one, two = (json.load(open(f"{R}/train_throughput_{n}gpu_call4.json")) for n in (1, 2))
for p, rows in one["precisions"].items():
    for name, row in rows["variants"].items():
        r2 = two["precisions"][p]["variants"].get(name, {})
        if "tokens_per_s" in row and "tokens_per_s" in r2:
            print(f"{p} {name}: 1 GPU {row['tokens_per_s']:,.0f}, 2 GPUs {r2['tokens_per_s']:,.0f} tokens/s, "
                  f"{r2['tokens_per_s'] / row['tokens_per_s']:.2f}x (target >= 1.9)")
PY
