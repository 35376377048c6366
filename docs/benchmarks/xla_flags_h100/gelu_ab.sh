# The bf16 training step with the activations' backward recomputed from their bf16 input (this
# tree) against the same step keeping autodiff's float32 residual (.ab/head.tgz: `git archive` of
# the commit before), `anisotropy-jax train --config=train:clm+gpu` at bf16, 400 steps, alternating
# twice; tokens/s the median over steps 300-399. Run with the `run` tool, carry [".whl2", ".ab"]:
#   bash docs/benchmarks/xla_flags_h100/gelu_ab.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl2/*.whl || exit 1
export PYTHONUNBUFFERED=1
S=$OUT/gelu_ab.txt; nvidia-smi --query-gpu=name --format=csv,noheader > $S
rm -rf /tmp/before && mkdir -p /tmp/before && tar xzf .ab/head.tgz -C /tmp/before
for round in 1 2; do
  for tree in before after; do
    src=$([ $tree = after ] && pwd || echo /tmp/before)
    PYTHONPATH=$src:/tmp/site timeout 150 python3 -m anisotropy_jax train \
      --config=train:clm+gpu --config.steps=400 --config.checkpoint_every=0 \
      --config.analysis.run=False --config.model.precision=bfloat16 \
      --workdir=/tmp/g_${tree}_$round > /tmp/g_${tree}_$round.log 2>&1
    echo "$tree round $round rc=$?" >> $S
  done
done
python3 - >> $S <<'PY'
import json, statistics
for name in ("before_1", "after_1", "before_2", "after_2"):
    rows = [json.loads(l) for l in open(f"/tmp/g_{name}/metrics.jsonl")]
    rate = [r["tokens_per_s"] for r in rows if r["step"] >= 300 and r.get("tokens_per_s")]
    print(f"{name}: median {statistics.median(rate):,.0f} tokens/s; final loss {rows[-1]['loss']:.6f}")
PY
