# One device call: the outliers grid's no-gain arm (docs/results/normalizations/outliers_h100/
# call.sh, the same settings as the other arms), then the inputs of Li et al.'s compression
# verdict: the default normalisation grid's softmax cells (byte models, both datasets, 3 seeds)
# and the :gpu embeddings study at its smallest width (the BPE control, 5 seeds) with denser
# late checkpoints. Run with the `run` tool from the repository root, carry [".whl2"]:
#   bash docs/results/normalizations/compression_h200/call.sh
# What comes back: outliers_no_gain.tgz, normalizations.tgz, embeddings.tgz (results, no
# checkpoints), the logs and summary.txt.
set -u
START=$(date +%s)
ARMS=no_gain LIMIT=190 bash docs/results/normalizations/outliers_h100/call.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
S=$OUT/summary.txt; left() { echo $((${1} - ($(date +%s) - START))); }
timeout $(left 400) python3 experiments/normalizations.py --config=normalizations \
  --config.normalizations='("softmax",)' --workdir=/tmp/c/normalizations > $OUT/normalizations.log 2>&1
echo "normalizations rc=$? at $(( $(date +%s) - START )) s" >> $S
timeout $(left 585) python3 experiments/embeddings.py --config=embeddings:gpu --config.widths='(128,)' \
  --config.checkpoint_steps='(0, 10, 30, 100, 200, 300, 400, 600, 800, 1000, 1250, 1500)' \
  --workdir=/tmp/c/embeddings > $OUT/embeddings.log 2>&1
echo "embeddings rc=$? at $(( $(date +%s) - START )) s" >> $S
for d in normalizations embeddings; do
  tar czf $OUT/$d.tgz --exclude=checkpoints --exclude="*.npz" -C /tmp/c $d
done
