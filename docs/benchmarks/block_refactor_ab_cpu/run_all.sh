# usage: run_all.sh TREE OUTPREFIX
set -u
TREE=$1; O=$2; cd $TREE; export PYTHONPATH=$TREE JAX_COMPILATION_CACHE_DIR=/tmp/ab/jc_$(basename $O)
PY=/work/main/.venv/bin/python
run() { local name=$1; shift; rm -rf $O/$name; timeout 900 $PY "$@" --workdir=$O/$name > $O/$name.log 2>&1; echo "$name rc=$?" >> $O/summary.txt; }
mkdir -p $O; : > $O/summary.txt
MINILM=$($PY -c "from anisotropy_jax.models import bert; print(bert.packaged_minilm_dir())")
run pretrained_minilm experiments/pretrained_anisotropy.py --config=experiments/configs/pretrained_anisotropy.py:smoke
run cross_modal experiments/cross_modal.py --config=experiments/configs/cross_modal.py:smoke
run depth experiments/depth_sweep.py --config=experiments/configs/depth_sweep.py:smoke
run train_clm experiments/train.py --config=experiments/configs/train_clm.py:smoke
run train_mlm experiments/train.py --config=experiments/configs/train_mlm.py:smoke
run sweep experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py:smoke+control --figure_processes=0
