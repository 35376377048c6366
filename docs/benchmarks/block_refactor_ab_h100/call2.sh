set -u; ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
R=$OUT; nvidia-smi --query-gpu=name --format=csv,noheader > $R/summary.txt
for round in 1 2; do for v in old new; do cd $ROOT/.gpu_$v
  python3 experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py --workdir=/tmp/c_${v}_$round --compilation_cache=off > /dev/null 2>&1; echo "cold ${v} $round rc=$?" >> $R/summary.txt; cd $ROOT; done; done
for round in 1 2 3 4 5 6; do for v in old new; do cd $ROOT/.gpu_$v
  t0=$(date +%s.%N); python3 experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py --workdir=/tmp/w_${v}_$round --compilation_cache=/tmp/jc_$v > /dev/null 2>&1; rc=$?; t1=$(date +%s.%N)
  echo "warm_main ${v} $round rc=$rc wall=$(python3 -c "print(round($t1-$t0,3))")" >> $R/summary.txt; cd $ROOT; done; done
python3 - >> $R/summary.txt <<'PY'
import numpy as np, json
def load(p): return np.load(p+'/results.npz')
def same(p,q):
    a,b=load(p),load(q); return all(np.array_equal(a[k],b[k]) for k in a.files)
print('old cold1 vs old cold2 bit-identical', same('/tmp/c_old_1','/tmp/c_old_2'))
print('new cold1 vs new cold2 bit-identical', same('/tmp/c_new_1','/tmp/c_new_2'))
print('old cold1 vs new cold1 bit-identical', same('/tmp/c_old_1','/tmp/c_new_1'))
for v in ('old','new'):
    s=[list(json.load(open(f'/tmp/w_{v}_{r}/results.json'))['runs'].values())[0]['seconds'] for r in range(1,7)]
    print(v,'in-script seconds (warm cache)',[round(x,3) for x in s])
PY
