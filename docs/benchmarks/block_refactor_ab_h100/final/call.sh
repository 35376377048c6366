set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
R=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $R/summary.txt; echo "new = $(cat .gpu_new/COMMIT), old = 047f0e7" >> $R/summary.txt
B="--config=benchmarks/configs/benchmark.py --config.jax_loop=False --config.metrics_at_scale=False --config.device_counts=(1,) --config.memory_chunks=(32,) --config.torch=False --compilation_cache=off"
for round in 1 2; do for v in old new; do cd $ROOT/.gpu_$v
  python3 -m benchmarks.benchmark $B --workdir=/tmp/b_${v}_$round > /tmp/b_${v}_$round.log 2>&1; echo "bench_${v}_$round rc=$?" >> $R/summary.txt
  cp /tmp/b_${v}_$round/benchmark.json $R/bench_${v}_$round.json; cd $ROOT; done; done
for round in 1 2 3 4 5 6; do for v in old new; do cd $ROOT/.gpu_$v
  t0=$(date +%s.%N); python3 experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py --workdir=/tmp/w_${v}_$round --compilation_cache=/tmp/jc_$v > /tmp/w_${v}_$round.log 2>&1; rc=$?; t1=$(date +%s.%N)
  echo "main ${v} $round rc=$rc wall=$(python3 -c "print(round($t1-$t0,3))") (round 1: cold cache)" >> $R/summary.txt; cd $ROOT; done; done
tail -3 /tmp/w_new_1.log >> $R/summary.txt
python3 - >> $R/summary.txt <<'PY'
import json, statistics as st
for v in ('old','new'):
    s=[list(json.load(open(f'/tmp/w_{v}_{r}/results.json'))['runs'].values())[0]['seconds'] for r in range(1,7)]
    print(v,'main job in-script seconds',[round(x,3) for x in s])
    for k in ('jax_sweep','jax_full_metrics'):
        print(v, k, 'median ms', [round(st.median(json.load(open(f'/tmp/b_{v}_{r}/benchmark.json'))['variants'][k]['times_s'])*1e3,2) for r in (1,2)])
PY
