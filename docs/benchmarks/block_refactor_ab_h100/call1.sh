set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
R=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $R/summary.txt
B="--config=benchmarks/configs/benchmark.py --config.jax_loop=False --config.metrics_at_scale=False --config.device_counts=(1,) --config.memory_chunks=(32,) --config.torch=False --compilation_cache=off"
for round in 1 2; do for v in old new; do cd $ROOT/.gpu_$v
  python3 -m benchmarks.benchmark $B --workdir=/tmp/b_${v}_$round > /tmp/b_${v}_$round.log 2>&1; echo "bench_${v}_$round rc=$?" >> $R/summary.txt
  cp /tmp/b_${v}_$round/benchmark.json $R/bench_${v}_$round.json; cd $ROOT; done; done
for round in 1 2 3 4; do for v in old new; do cd $ROOT/.gpu_$v
  t0=$(date +%s.%N); python3 experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py --workdir=/tmp/m_${v}_$round --compilation_cache=/tmp/jc_$v > /tmp/m_${v}_$round.log 2>&1; rc=$?; t1=$(date +%s.%N)
  echo "main_${v}_$round rc=$rc wall=$(python3 -c "print(round($t1-$t0,3))") (cache round 1 cold)" >> $R/summary.txt; cd $ROOT; done; done
python3 - >> $R/summary.txt <<'PY'
import numpy as np
a=np.load('/tmp/m_old_1/results.npz'); b=np.load('/tmp/m_new_1/results.npz')
print('main job npz: same keys', sorted(a.files)==sorted(b.files), '; bit-identical', all(np.array_equal(a[k],b[k]) for k in a.files))
PY
cp /tmp/m_new_1/results.json $R/main_new.json; cp /tmp/m_old_1/results.json $R/main_old.json
