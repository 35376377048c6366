# On one H100: the bias sweep's sink metrics, the position-free sink rate among
# them, (1) for every normalisation (`:normalizations`, XLA path, the default 30-point grid) and
# (2) for softmax through the fused Pallas kernel, whose on-chip per-key column sums
# (`attn_key_mass`) feed the position-free rate (`:control`, sink metrics on). Same block, seeds
# and grid (5 seeds), so (2) must equal (1)'s softmax rows. Run with the `run` tool from the root of a
# `git archive` of the commit (carry [".whl", ".gpu_new"]), kind nvidia-h100-x1:
#   cd .gpu_new && bash docs/results/sweep/sink_rates_h100/call.sh
set -u; WHL=$(cd .. && pwd)/.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $WHL/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site:$WHL/site
S=$OUT/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" >> $S 2>&1
for run in normalizations pallas; do
  if [ $run = normalizations ]; then ARGS="--config=sweep:normalizations"
  else ARGS="--config=sweep:control --config.model.attention_impl=pallas --config.sink_metrics=True"; fi
  ARGS="$ARGS --config.num_seeds=5"; START=$(date +%s)
  timeout 270 python3 experiments/sweep.py $ARGS --workdir=/tmp/seeds5_$run > $OUT/$run.log 2>&1
  echo "$run rc=$? wall $(( $(date +%s) - START )) s" >> $S
  cp /tmp/seeds5_$run/results.json $OUT/results_$run.json 2>/dev/null
done
ls -la /tmp/seeds5_normalizations /tmp/seeds5_pallas >> $S 2>&1
