# One GPU call: (1) the bf16 training step's HLO, with the operand dtypes of its largest fusions;
# (2) an A/B of XLA flags on `anisotropy-jax train --config=train:clm+gpu` (bf16 and TF32), each
# checked against the default's losses; (3) the main job (README's bias sweep, default config)
# against commit 047f0e7, whole processes, alternating, cold and warm compilation cache.
# Run with the `run` tool from the repository root, carry [".whl2", ".ab"] (.ab/old.tgz is
# `git archive 047f0e7 anisotropy_jax experiments setup.py | gzip`):
#   bash docs/benchmarks/xla_flags_h100/call.sh hlo       (1)
#   bash docs/benchmarks/xla_flags_h100/call.sh flags     (2) (the 'tf32' runs are precision 'highest')
#   bash docs/benchmarks/xla_flags_h100/call.sh main_job  (3)
set -u
PART=${1:-flags}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl2/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
S=$OUT/summary.txt; nvidia-smi --query-gpu=name --format=csv,noheader > $S
python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)" >> $S
train() {  # name, precision, extra XLA flags
  local name=$1 precision=$2 flags=$3
  XLA_FLAGS="$flags" timeout 150 python3 -m anisotropy_jax train --config=train:clm+gpu \
    --config.steps=400 --config.checkpoint_every=0 --config.analysis.run=False \
    --config.model.precision=$precision --workdir=/tmp/t_$name > /tmp/log_$name.txt 2>&1
  echo "train $name rc=$? flags='$flags'" >> $S
  mkdir -p /tmp/m; cp /tmp/t_$name/metrics.jsonl /tmp/m/$name.jsonl 2>/dev/null
}
if [ $PART = hlo ]; then
# (1) the HLO of a 3-step bf16 run, after optimisation (the first `flags` call asked for it
# without the warmup override, which the config refuses: warmup 200 > 3 steps)
XLA_FLAGS="--xla_dump_to=/tmp/hlo --xla_dump_hlo_as_text" \
  timeout 150 python3 -m anisotropy_jax train --config=train:clm+gpu --config.steps=3 \
  --config.optim.warmup_steps=1 --config.checkpoint_every=0 --config.analysis.run=False \
  --config.model.precision=bfloat16 --workdir=/tmp/t_dump > /tmp/log_dump.txt 2>&1
echo "dump rc=$?" >> $S
python3 docs/benchmarks/xla_flags_h100/fusion_dtypes.py /tmp/hlo > $OUT/fusion_dtypes.txt 2>&1
tail -3 /tmp/log_dump.txt >> $S
fi
if [ $PART = flags ]; then
# (2) the flags, alternating with the default
train bf16_default_1 bfloat16 ""
train bf16_cublaslt_1 bfloat16 "--xla_gpu_enable_cublaslt=true"
train bf16_cudnn_ln_1 bfloat16 "--xla_gpu_enable_cudnn_layer_norm=true"
train bf16_no_triton_gemm_1 bfloat16 "--xla_gpu_enable_triton_gemm=false"
train bf16_triton_any_1 bfloat16 "--xla_gpu_triton_gemm_any=true"
train bf16_default_2 bfloat16 ""
train tf32_default highest ""
train tf32_cublaslt highest "--xla_gpu_enable_cublaslt=true"
train tf32_no_triton_gemm highest "--xla_gpu_enable_triton_gemm=false"
python3 docs/benchmarks/xla_flags_h100/summarise.py /tmp/m > $OUT/flags.json 2>> $S
tail -3 /tmp/log_bf16_default_1.txt >> $S
tar czf $OUT/logs.tgz -C /tmp m $(cd /tmp && ls log_*.txt)
fi
if [ $PART = main_job ]; then
# (3) the main job: this tree against 047f0e7, cold then warm cache, alternating, 3 rounds
rm -rf /tmp/old /tmp/cache_* /tmp/job_*; mkdir -p /tmp/old && tar xzf .ab/old.tgz -C /tmp/old
for round in 1 2 3; do
  for tree in new old; do
    src=$([ $tree = new ] && pwd || echo /tmp/old); cache=/tmp/cache_${tree}_$round
    script=$([ $tree = new ] && echo sweep.py \
             || echo "bias_sweep.py --config=experiments/configs/bias_sweep.py")
    for phase in cold warm; do
      start=$(date +%s.%N)
      (cd $src && PYTHONPATH=$src:/tmp/site JAX_COMPILATION_CACHE_DIR=$cache timeout 120 \
        python3 experiments/$script --workdir=/tmp/job_${tree}_${round}_$phase \
        > /tmp/log_job_${tree}_${round}_$phase.txt 2>&1)
      rc=$?; end=$(date +%s.%N)
      echo "main_job $tree round $round $phase rc=$rc seconds $(python3 -c "print(round($end-$start,2))")" >> $S
    done
  done
done
tar czf $OUT/logs.tgz -C /tmp m $(cd /tmp && ls log_*.txt)
fi
