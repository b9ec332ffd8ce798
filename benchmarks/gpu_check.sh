#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py) on a machine without a package registry: install
# the wheels in $WHEELS (see ../shared/docs/GPU_NOTES.md: pydantic, dp-accounting, seqeval,
# transformers 5.24), then run every step in its own process under its own timeout
# (tiny 150 s, t5-small 150 s, cnn-femnist 90 s: with start-up, under 8 minutes).
#
#   WHEELS=gpu-wheels bash benchmarks/gpu_check.sh "$OUT"          # on the GPU machine
#   DEVICE=cpu QUICK=1 STEPS=tiny bash benchmarks/gpu_check.sh out # plumbing, on a CPU
#
# Writes OUT/gpu_check.jsonl (one JSON line per step), OUT/gpu.txt (nvidia-smi) and
# OUT/gpu_check.log (steps that failed or ran out of time). Exit status 1 if any did.
set -u
cd "$(dirname "$0")/.."
OUT=${1:-gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${WHEELS:-}" ]; then
    $PY -m pip install -q --no-index --no-deps "$WHEELS"/*.whl || exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1 || true
status=0
for step in ${STEPS:-tiny:150 t5-small:150 cnn-femnist:90}; do
    name=${step%%:*}
    limit=${step#*:}
    [ "$limit" = "$step" ] && limit=150
    if ! timeout "$limit" $PY benchmarks/gpu_check.py --device "${DEVICE:-cuda}" \
            --step "$name" --json "$OUT/gpu_check.jsonl" ${QUICK:+--quick}; then
        echo "step $name: failed or over ${limit} s" | tee -a "$OUT/gpu_check.log"
        status=1
    fi
done
exit $status
