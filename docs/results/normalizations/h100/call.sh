# The default normalisation grid on one H100, one dataset per call (a device command
# may run 10 minutes; the grid's cells are independent). Run with the `run` tool from the
# repository root, carry [".whl"], kind nvidia-h100-x1:
#   bash docs/results/normalizations/h100/call.sh shakespeare
#   bash docs/results/normalizations/h100/call.sh bigram_backcopy   [trace]
# With "trace", the call first traces the vmapped step of 5 seeds and of 1.
set -u; ROOT=$(pwd); DATASET=$1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site:$ROOT/.whl/site
R=$OUT; S=$R/summary_$DATASET.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
if [ "${2:-}" = trace ]; then
  for n in 1 5; do
    timeout 150 python3 -m benchmarks.profiling.trace_train --precision=default --seeds=$n \
      --repeats=12 --top=12 --json=$R/trace_seeds$n.json > /tmp/t.log 2>&1
    echo "trace seeds=$n rc=$?" >> $S; grep -v "^I1\|^W1" /tmp/t.log | head -6 >> $S
  done
fi
W=/tmp/grid_$DATASET; START=$(date +%s)
timeout 480 python3 experiments/normalizations.py --config=normalizations \
  --config.datasets="('$DATASET',)" --workdir=$W > $R/grid_$DATASET.log 2>&1
echo "grid $DATASET rc=$? wall $(( $(date +%s) - START )) s" >> $S
cp $W/results.json $R/results_$DATASET.json 2>/dev/null; cp $W/results.md $R/results_$DATASET.md 2>/dev/null
cp $W/figures/normalizations.png $R/normalizations_$DATASET.png 2>/dev/null
tail -30 $R/grid_$DATASET.log >> $S
