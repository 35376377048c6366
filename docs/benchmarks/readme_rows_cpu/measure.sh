#!/usr/bin/env bash
# Wall time of each README row's command at smoke size, on the machine it runs on, from process
# start to exit (a fresh process each, the persistent compilation cache off), written to
# times.txt beside this script (one line each: seconds, exit status, command).
#   docs/benchmarks/readme_rows_cpu/measure.sh      (from the repository root, after install.sh test)
set -u
cd "$(dirname "$0")/../../.."
OUT=docs/benchmarks/readme_rows_cpu/times.txt
W=$(mktemp -d)
export JAX_COMPILATION_CACHE_DIR= ANISOTROPY_JAX_SMOKE=1
PY=.venv/bin/python
{ echo "# $(git rev-parse --short HEAD) $(nproc) cores, $(date -u +%FT%TZ), load before: $(cut -d' ' -f1-3 /proc/loadavg)"; } > $OUT
row() {  # row NAME ARGS...
  local name=$1; shift
  local start=$(date +%s.%N)
  "$@" > "$W/$name.log" 2>&1
  local rc=$?
  printf '%6.1f s  rc=%d  %s\n' "$(python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$(date +%s.%N)" "$start")" $rc "$*" >> $OUT
}
row sweep_control $PY experiments/sweep.py --config=sweep:control+smoke --workdir=$W/sweep
row seeds $PY experiments/seeds.py --config=train:small+smoke --seeds=0,1,2 --workdir=$W/seeds
row pretrained $PY experiments/pretrained.py --config=pretrained:smoke --config.model_dir=minilm-l6 --workdir=$W/pretrained
row cross_modal $PY experiments/cross_modal.py --config=cross_modal:smoke --workdir=$W/cross_modal
row embeddings $PY experiments/embeddings.py --config=embeddings:smoke --workdir=$W/embeddings
row depth $PY experiments/depth.py --config=depth:bert_base+smoke --workdir=$W/depth
row extreme $PY experiments/extreme.py --config=extreme:smoke --workdir=$W/extreme
row sink_metrics $PY experiments/sweep.py --config=sweep:control+smoke --config.sink_metrics=True --workdir=$W/sinks
row sweep_normalizations $PY experiments/sweep.py --config=sweep:normalizations+smoke --workdir=$W/sweep_norm
row normalizations $PY experiments/normalizations.py --config=normalizations:smoke --workdir=$W/norm
row report $PY experiments/report.py --config=report:gpu+smoke --workdir=$W/report --report=$W/REPORT.md
cat $OUT
rm -rf "$W"
