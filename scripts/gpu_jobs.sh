#!/usr/bin/env bash
# The GPU machine's side of a results run: install qkbench from this tree, then run the
# named jobs in order, each writing its output under $OUT (an archive is rewritten after
# every pass, so a job cut off by the time limit still returns what it finished; with
# RESUME_FROM=DIR a sweep whose archive DIR/NAME.json exists continues it there instead).
#
#   QKBENCH_GIT_COMMIT=<sha> QKBENCH_GIT_DIRTY=0 bash scripts/gpu_jobs.sh tests env dit prefill
#
# Jobs: tests (the whole suite on CUDA), env (`qkbench env`), blocked (qwen3-decode with
# the blocked schedule), or any shipped protocol name (a split vs fused sweep).
set -u -o pipefail
: "${OUT:?set OUT to the folder the outputs go to}"
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1

python -m pip install -q --no-deps --no-build-isolation . >"$OUT/install.log" 2>&1 \
    || { cat "$OUT/install.log"; exit 1; }
rm "$OUT/install.log"

sweep() {  # sweep NAME [options...]: one archive, continued from RESUME_FROM if there
    local name=$1; shift
    local resume=()
    if [[ -n ${RESUME_FROM:-} && -f $RESUME_FROM/$name.json ]]; then
        cp "$RESUME_FROM/$name.json" "$OUT/$name.json" && resume=(--resume)
    fi
    qkbench sweep --device cuda --out "$OUT/$name.json" "${resume[@]}" "$@"
}

status=0
for job in "$@"; do
    echo "== $job $(date -u +%T)"
    case $job in
        tests) python -m pytest -q -n 8 tests 2>&1 | tee "$OUT/pytest.txt" ;;
        env) qkbench env --device cuda 2>&1 | tee "$OUT/env.txt" ;;
        blocked) sweep qwen3-decode-blocked --protocol qwen3-decode --schedule blocked ;;
        *) sweep "$job" --protocol "$job" ;;
    esac
    rc=$?
    echo "== $job exit $rc"
    ((rc == 0)) || status=1
done
exit $status
