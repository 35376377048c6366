# The main job against commit 047f0e7 (whole processes, alternating), the step's memory-bound
# parts alone (benchmarks/fused_parts), and the training step's cores timed best-of-3 with the
# PyTorch peer in the same call. Run with the `run` tool from the repository root, carry
# [".whl2", ".ab"] (.ab/old.tgz: `git archive --format=tar.gz 047f0e7 anisotropy_jax experiments -o .ab/old.tgz`).
#   bash docs/benchmarks/train_ab_h200/call.sh main_job fused bf16 tf32 qkv bias_gelu   (any of the parts)
# Everything lands in $OUT/raw.tgz (the tool returns a limited number of files), summary.txt beside.
set -u
PARTS=" $* "
has() { [[ "$PARTS" == *" $1 "* ]]; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl2/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S
python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)" >> $S
bench() {  # name, then overrides of benchmarks/configs/train_throughput.py
  local name=$1; shift
  timeout 240 python3 -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
    --config.jax_loops='("async",)' --config.steps=100 --config.repeats=3 "$@" \
    --workdir=/tmp/tt_$name > $OUT/tt_$name.txt 2>&1
  echo "bench $name rc=$?" >> $S; cp /tmp/tt_$name/train_throughput.json $OUT/tt_$name.json
}
if has main_job; then
rm -rf /tmp/old /tmp/cache_* /tmp/job_* /tmp/imp_*; mkdir -p /tmp/old && tar xzf .ab/old.tgz -C /tmp/old
for round in 1 2 3; do
  for tree in new old; do
    src=$([ $tree = new ] && pwd || echo /tmp/old); cache=/tmp/cache_${tree}_$round
    for phase in cold warm; do
      script=$([ $tree = new ] && echo "sweep.py --phase_times=$OUT/phases_${round}_$phase" \
               || echo "bias_sweep.py --config=experiments/configs/bias_sweep.py")
      start=$(date +%s.%N)
      (cd $src && PYTHONPATH=$src:/tmp/site JAX_COMPILATION_CACHE_DIR=$cache timeout 120 \
        python3 experiments/$script --workdir=/tmp/job_${tree}_${round}_$phase \
        > $OUT/log_job_${tree}_${round}_$phase.txt 2>&1)
      rc=$?; end=$(date +%s.%N)
      echo "main_job $tree round $round $phase rc=$rc seconds $(python3 -c "print(round($end-$start,2))")" >> $S
    done
  done
done
for tree in new old; do  # the imports of each tree's main job, warm cache
  src=$([ $tree = new ] && pwd || echo /tmp/old)
  script=$([ $tree = new ] && echo sweep.py || echo "bias_sweep.py --config=experiments/configs/bias_sweep.py")
  (cd $src && PYTHONPATH=$src:/tmp/site JAX_COMPILATION_CACHE_DIR=/tmp/cache_${tree}_1 \
    python3 -X importtime experiments/$script --workdir=/tmp/imp_$tree > /dev/null 2> $OUT/importtime_$tree.txt)
done
fi
if has fused; then
timeout 120 python3 -m benchmarks.fused_parts > $OUT/fused_parts.txt 2>&1; echo "fused_parts rc=$?" >> $S
fi
if has bf16; then
bench bf16_softmax --config.precisions='("bfloat16",)' --config.jax_attention='("auto","flash")' \
  --config.torch_modes='("reduce-overhead",)'
for n in sigmoid softpick off_by_one; do
  bench bf16_$n --config.precisions='("bfloat16",)' --config.jax_attention='("flash",)' \
    --config.attention_normalization=$n --config.torch_modes='()'
done
fi
if has tf32; then
bench tf32_xla_first --config.precisions='("default",)' --config.jax_attention='("xla","flash")' \
  --config.torch_modes='("reduce-overhead",)'
bench tf32_flash_first --config.precisions='("default",)' --config.jax_attention='("flash","xla")' \
  --config.torch_modes='()'
fi
if has qkv; then  # the input projection: one GEMM and a split, or three GEMMs (bf16, 2 rounds)
timeout 300 python3 -m benchmarks.qkv_layout_ab bfloat16 2 > $OUT/qkv_bf16.txt 2>&1
echo "qkv rc=$?" >> $S
fi
if has bias_gelu; then  # the MLP's bias + GELU as Pallas kernels: alone, then the step (bf16, 2 rounds)
timeout 200 python3 -m benchmarks.bias_gelu_ab bfloat16 2 > $OUT/bias_gelu_bf16.txt 2>&1
echo "bias_gelu rc=$?" >> $S
fi
cp $S /tmp/summary.txt; tar czf /tmp/raw.tgz -C $OUT . && rm -rf $OUT/* && mv /tmp/raw.tgz /tmp/summary.txt $OUT/
