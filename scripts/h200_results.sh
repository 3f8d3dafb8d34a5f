#!/usr/bin/env bash
# The H200 runs behind the README's figures (2026-12-03), in two device calls: `bash
# scripts/h200_results.sh method` (its last two sweeps ran past the call's ten minutes and
# were cut) then `bash scripts/h200_results.sh rest`, what the session's device time left
# room for. Each job's archive lands in $OUT/results.tar.gz (scripts/gpu_jobs.sh).
#
# The tree travels without .git: the archives take the commit from QKBENCH_GIT_COMMIT;
# the gate runs need a repository, cloned from the bundle carried in .qkgit/ (main and the
# throwaway `slowed` branch, whose one commit makes the fused kernel slower on purpose).
set -u
: "${QKBENCH_GIT_COMMIT:?the commit this tree is}" "${GOOD:?the commit to gate against}"
: "${SLOW:?the throwaway slowed commit}"
export QKBENCH_GIT_DIRTY=0
here=$(dirname "$0")
sweep='qkbench sweep --device cuda'
case ${1:?method or rest} in
    method) bash "$here/gpu_jobs.sh" \
        'qkbench env --device cuda > $WORK/env.txt' \
        'qkbench calibrate --device cuda --protocol qwen3-decode --planted 32 --out $WORK' \
        'qkbench calibrate --device cuda --protocol text-decode --planted 32 --out $WORK' \
        "$sweep --protocol qwen3-decode --route split --route fused --route fused-pdl --out \$WORK/qwen3-decode.json.gz" \
        "$sweep --protocol text-decode --route split --route fused --route fused-pdl --out \$WORK/text-decode.json.gz" ;;
    rest) bash "$here/gpu_jobs.sh" \
        'timeout 90 compute-sanitizer --tool memcheck python scripts/sanitize_case.py > $WORK/sanitize.txt 2>&1; tail -12 $WORK/sanitize.txt' \
        "$sweep --protocol qwen3-decode --route split --route fused --route fused-pdl --out \$WORK/qwen3-decode.json.gz" \
        'git clone -q .qkgit/repo.bundle /tmp/repo && mkdir -p $WORK/gate-same && qkbench gate --device cuda --against HEAD --repo /tmp/repo --protocol qwen3-decode --samples 100 --out $WORK/gate-same --junit $WORK/gate-same/junit.xml --markdown $WORK/gate-same/summary.md' \
        "cd /tmp/repo && git checkout -q $SLOW && python -m pip install -q --no-deps --no-build-isolation . && mkdir -p \$WORK/gate-slowed && QKBENCH_GIT_COMMIT=$SLOW qkbench gate --device cuda --against $GOOD --protocol qwen3-decode --samples 100 --out \$WORK/gate-slowed --junit \$WORK/gate-slowed/junit.xml --markdown \$WORK/gate-slowed/summary.md; rc=\$?; python -m pip install -q --no-deps --no-build-isolation $PWD; exit \$rc" \
        "$sweep --protocol text-decode --route split --route fused --route fused-pdl --samples 100 --out \$WORK/text-decode.json.gz" ;;
esac
