set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
cd .gpu_head; export PYTHONPATH=.:/tmp/site
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
git_commit=$(cat COMMIT 2>/dev/null); echo "commit $git_commit"
CFG=experiments/configs/bias_sweep.py
tm() { local name=$1; shift; local t0=$(date +%s.%N); "$@" > $R/$name.log 2>&1; local rc=$?; local t1=$(date +%s.%N); echo "$name rc=$rc wall=$(python3 -c "print(round($t1-$t0,2))") $(grep -m1 'chunk 1/' $R/$name.log)" | tee -a $R/summary.txt; }
NOTRITON_OFF='import sys,runpy; import anisotropy_jax.models.layers as l; l.GPU_COMPILER_OPTIONS.clear(); sys.argv=sys.argv[1:]; runpy.run_path(sys.argv[0], run_name="__main__")'
tm main_nocache python3 experiments/bias_sweep.py --config=$CFG --workdir=$R/main_nocache --compilation_cache=off
tm main_cache1 python3 experiments/bias_sweep.py --config=$CFG --workdir=$R/main_cache1 --compilation_cache=/tmp/jc
tm main_cache2 python3 experiments/bias_sweep.py --config=$CFG --workdir=$R/main_cache2 --compilation_cache=/tmp/jc
tm main_triton python3 -c "$NOTRITON_OFF" experiments/bias_sweep.py --config=$CFG --workdir=$R/main_triton --compilation_cache=off
for p in default bfloat16; do for impl in xla pallas; do
tm main_${p}_${impl} python3 experiments/bias_sweep.py --config=$CFG --workdir=$R/main_${p}_${impl} --compilation_cache=off --config.precision=$p --config.model.attention_impl=$impl
done; done
tm depth_bert_base python3 experiments/depth_sweep.py --config=experiments/configs/depth_sweep.py:bert_base --workdir=$R/depth1 --compilation_cache=/tmp/jc
tm depth_bert_base_cached python3 experiments/depth_sweep.py --config=experiments/configs/depth_sweep.py:bert_base --workdir=$R/depth2 --compilation_cache=/tmp/jc
B="--config=benchmarks/configs/benchmark.py --config.jax_loop=False --config.metrics_at_scale=False --config.device_counts=(1,) --config.memory_chunks=(32,) --compilation_cache=off"
for p in tf32 bfloat16; do
tm bench_$p python3 -m benchmarks.benchmark $B --config.precision=$p --workdir=$R/bench_$p
tm bench_${p}_triton python3 -c "$NOTRITON_OFF" benchmarks/benchmark.py $B --config.precision=$p --config.torch=False --workdir=$R/bench_${p}_triton
done
rm -rf $R/*/figures $R/*/results.npz $R/*/chunks
cd $OUT && tar czf r.tgz r && rm -rf r
