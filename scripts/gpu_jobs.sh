#!/usr/bin/env bash
# The GPU machine's side of a results run: install qkbench from this tree, then run each
# job given as an argument (a shell command line) in order, its output kept in
# $WORK/logs/NNN.log. Archives go to $WORK (give them `--out $WORK`). After every job the
# whole of $WORK is packed into $OUT/results.tar.gz, so a call cut off by its time limit
# still returns every job it finished (a device call returns at most 8 files).
#
#   QKBENCH_GIT_COMMIT=<sha> QKBENCH_GIT_DIRTY=0 bash scripts/gpu_jobs.sh \
#       'qkbench env --device cuda' \
#       'qkbench sweep --device cuda --protocol qwen3-decode --out $WORK'
#
# A job's command line is evaluated by bash, so it can use $WORK, pipes and redirections.
set -u -o pipefail
: "${OUT:?set OUT to the folder the outputs go to}"
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
export WORK=${WORK:-/tmp/qkbench-jobs}
mkdir -p "$WORK/logs"

python -m pip install -q --no-deps --no-build-isolation . >"$WORK/logs/install.log" 2>&1 \
    || { cat "$WORK/logs/install.log"; exit 1; }

status=0
n=0
for job in "$@"; do
    n=$((n + 1))
    log=$(printf '%s/logs/%03d.log' "$WORK" "$n")
    echo "== $job ($(date -u +%T))" | tee "$log"
    start=$SECONDS
    bash -c "$job" 2>&1 | tee -a "$log"
    rc=$?
    echo "== exit $rc after $((SECONDS - start)) s" | tee -a "$log"
    ((rc == 0)) || status=1
    tar -czf "$OUT/results.tar.gz.tmp" -C "$WORK" . && mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"
done
exit $status
