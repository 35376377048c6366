# The learning-rate sweep of the outliers grid's optimisers: each optimiser at its default and at
# 1/3× and 3× of it (AdamW and rotated AdamW 1e-3, Muon 0.02 on its matrices, its AdamW part
# left at 1e-3, SGD 0.1), Bigram-Backcopy, softmax,
# the reduced grid's model and data (call.sh one folder up), 3 seeds vmapped, STEPS steps (600).
# The rule, fixed before the run: per optimiser, the learning rate with the lowest mean final
# validation loss over the seeds (lr_sweep.py here reads the archives).
# Run with the `run` tool from the repository root, carry [".whl2"]:
#   bash docs/results/normalizations/outliers_h100/lr_sweep/call.sh
# What comes back: $OUT/raw.tgz (each run's workdir without checkpoints, its log, summary.txt).
set -u
T0=$(date +%s); TOTAL=${TOTAL:-560}; R=$OUT/raw; mkdir -p $R
for spec in "adamw 1e-3" "sgd 0.1" "muon 0.02" "adamw_rotated 1e-3" \
            "adamw 3e-4" "adamw 3e-3" "sgd 0.03" "sgd 0.3" "muon 0.006" "muon 0.06" \
            "adamw_rotated 3e-4" "adamw_rotated 3e-3"; do
  set -- $spec
  case $1 in sgd) field=sgd_learning_rate ;; muon) field=muon_learning_rate ;; *) field=learning_rate ;; esac
  left=$((TOTAL - ($(date +%s) - T0)))
  [ $left -gt 45 ] || { echo "$1 $2: not started (${left} s left)" >> $R/summary.txt; continue; }
  OUT=$R ARMS=$1 TAG=_lr$2 STEPS=${STEPS:-600} SEEDS="(0, 1, 2)" LIMIT=$left \
    EXTRA_FLAGS="--config.bigram_backcopy.optim.$field=$2" \
    bash docs/results/normalizations/outliers_h100/call.sh
done
tar czf $OUT/raw.tgz -C $OUT raw && rm -rf $R
