#!/usr/bin/env bash
# The H200 runs behind the README's figures (2026-12-03), in two device calls: `bash
# scripts/h200_results.sh method` (its last two sweeps ran past the call's ten minutes and
# were cut) then `bash scripts/h200_results.sh rest`, what the session's device time left
# room for. Each job's archive lands in $OUT/results.tar.gz (scripts/gpu_jobs.sh).
#
# The tree travels without .git, and within 64 MiB, which results/ alone now passes (move
# results/ aside for the call, an empty one in its place). The archives take the commit
# from QKBENCH_GIT_COMMIT; the gate runs need a repository, cloned from the bundle carried in .qkgit/ (main and the
# throwaway `slowed` branch, whose one commit makes the fused kernel slower on purpose).
#
# Issue 11's runs, each protocol in one sweep with every route (the fused ones, split's
# null arm, and the eager and compiled baselines), passes in one process so that
# torch.compile compiles each shape once; prefill-sized cells with fewer, shorter samples:
# `tune` (the kernel bench with its plan variants first, then prefill hot and cold, DiT and
# the two text decode protocols); after the table loads went into the row tiles' shape
# (version 3.2), `next` (the GPU tests, the sanitizer cases, the bench, prefill hot and
# DiT); after partial rotary took one-warp programs of 4 rows (the bench's lead), `partial`
# (prefill hot and cold and text-decode, the fused and split routes); `last`, what the
# session's device time had left (qwen3-decode, and MRoPE with compiled); `decode` (prefill
# cold and the decode protocols with every route, MRoPE included) is what the device time
# did not reach; after q and k tiles of the same tokens ran next to each other and the
# eager call went to Triton 3.6's C launcher (version 3.4), `v34` (the GPU tests, the
# sanitizer cases, the bench) then `v34b` (prefill hot and cold, the decode protocols and
# DiT); after chunks were kept to q and k tiles at most 1:2 apart in tokens, `v34c` (every
# protocol but DiT, whose tiles did not change); on 2026-12-04, with the kernels unchanged,
# `v34d` (prefill and DiT with every route, the baselines included, and text-decode again);
# after GQA's k tiles past the L2 were cut to twice a q tile's tokens (version 3.5), `v35`
# (the kernel and plan GPU tests, version 3.4's k tiles against 3.5's in one interleaved
# schedule with a null arm, prefill hot and cold) and `v35b` (the bench).
# Kernels 3.10-3.12 on the H200, each set one call of under ten minutes, in the order of
# what it decides (docs/kernel-notes.md, the eighth session's "The next device call"):
# `v312a` (3.12's fused programs gated against 3.10's, hot and cold; then the L2 bench:
# programs of 8192 elements, the few-programs arms at the decode geometries, what the table
# costs, the rules past the L2 below it, the Gluon prototype, the smaller program sizes at
# T = 512-8192, and Nsight Compute's read of the goal cells; each job 5-50 s on an H100,
# about six minutes in all), `v312d` (3.10's split
# route gated against 3.9's, the rows' copies), then `v312e`, `v312f` and `v312g` (the
# shipped protocols). Before the calls, here: `git tag -f kernels-3.10 06a0a6a && git
# bundle create v310.bundle kernels-3.10`, the same for `kernels-3.9 052ee53` into
# v39.bundle, and `cp results/h100/2026-12-05-v311/gate-few.toml
# results/h100/2026-12-05-v310-gate/gate-*.toml .` (the tree's root). The two bundles
# together (44 and 40 MB) pass the call's 64 MiB: keep in the root only the one the set
# clones (v310.bundle for `v312a`, v39.bundle for `v312d`).
# `v312a`, `v312e`, and the dit, decode and MRoPE runs of `v312f`/`v312g` ran on 2026-12-06
# (results/h200/2026-12-06-v312/). Kernels 3.13 (the few-programs cut at 16 programs a
# multiprocessor) next: `v313a` (3.13 gated against 3.12 at the few-program cells, hot and
# cold; smaller programs with and without a free table at T = 8192 and DiT; then the cold
# prefill cells that call had no time for, T = 2048 and 32768); before it, here: `git tag
# -f kernels-3.12 611c76c && git bundle create v312.bundle kernels-3.12` and the
# gate-few.toml above, with v312.bundle the only bundle in the root. `v313a` ran on
# 2026-12-07 on an H100 and on the H200 (results/h{100,200}/2026-12-07-v313a/). Next:
# `v314a` (kernels 3.14, the cut at 24 for launches whose k tiles hold 8 times a q tile's
# tokens: the bench's arms of 3.13's cut beside it, then 3.14 gated against 3.13, at (8,1),
# (16,2), (32,4) x 128, T = 2048-8192, hot and cold: about five minutes; before it, here:
# `git tag -f kernels-3.13 9a1e07a && git bundle create v313.bundle kernels-3.13` and
# `cp results/h200/2026-12-07-v314a/gate-gqa8.toml .`, v313.bundle the only bundle in the
# root), then `v312d`. `v314a` ran on an H100 on 2026-12-07 (results/h100/2026-12-07-v314a/;
# the H200 refused thirteen asks that session); its H200 run is still the next call.
# `tma` (2026-12-07, the twenty-first session): the rows moved by TMA boxes
# (scripts/proto_tma.py) beside the fused kernel and the rows' copies, at DiT and the D = 128
# prefill geometries, T = 8192 and 32768, hot and cold: about three minutes.
# `odd` (the twenty-fourth session): the padded pair tiles for rotary halves of no power of
# two (their GPU tests: the contract's cases at D = 96 and 80), gated against the whole-row
# tiles before them (4b68606, tag `odd-rows`), hot and cold, at
# results/h100/2026-12-07-odd-rotary/odd-rotary.toml; that protocol swept with the split
# route; the program sizes beside partial rotary's (`--arms odd-programs`). Before it,
# here: `git tag -f odd-rows 4b68606 && git bundle create inc.bundle kernels-3.13..odd-rows
# odd-rows`, v313.bundle as for `v314a`, and that protocol copied into the root.
# `v316a` (the twenty-fifth session): kernels 3.16, the fused kernel's instructions cut (the
# H200's Nsight Compute read of 3.12 found its SMs issuing 50-56 % of cycles, its ALU pipe
# busy 42-47 % and the conversion unit 22-25 %, where the rows' copy issues 5 %): the GPU
# tests of the kernels' bits and safety, then 3.16 gated against 3.15 (tag `kernels-3.15`
# = 216eb94) hot at results/h200/2026-12-08-v316a/gate-lean.toml and cold at
# gate-lean-cold.toml beside it (the large-T cells only), then the
# bench's `k-ratio-cut` arms of `v314a` (3.14's rule beside 3.13's in one kernel, so
# 3.16 does not confound them), then Nsight Compute at the goal cells. Before it, here:
# `git tag -f kernels-3.15 216eb94 && git bundle create inc.bundle kernels-3.13..kernels-3.15
# kernels-3.15`, v313.bundle as for `v314a`, and both protocols copied into the root. Its
# first three jobs ran on an H100 on 2026-12-08 (results/h100/2026-12-08-lean/; there the
# cold gate was still of all 16 cells, and was cut after two passes).
# `v316b`, straight after `v316a` on the same machine (it stops at once if that call's GPU
# tests failed): the shipped protocols' goal cells at 3.16 (DiT; prefill hot at D = 128,
# T = 8192 and 32768; prefill cold at T = 8192) and the two text decode protocols.
# A sweep cut by the call's limit resumes with the same arguments and `--resume`.
set -u
: "${QKBENCH_GIT_COMMIT:?the commit this tree is}"
export QKBENCH_GIT_DIRTY=0
here=$(dirname "$0")
sweep='qkbench sweep --device cuda'
every='--route split --route fused --route eager --route compiled --isolation inprocess'
decode="$every --route fused-pdl --samples 100"
large='--samples 30 --warmup 5 --inner-reps 8'
textdecode="$sweep --protocol text-decode --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/text-decode.json.gz"
l2='python scripts/bench_l2_policy.py --rounds 24'
smi='nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,driver_version --format=csv'
case ${1:?method, rest, tune, next, partial, last, decode, v34, v34b, v34c, v34d, v35, v35b, v312a, v312d-g, v313a, v314a, v316a, v316b, tma or odd} in
    v312a) bash "$here/gpu_jobs.sh" "$smi" \
        'git clone -q v310.bundle /tmp/r310 && timeout 150 qkbench gate --against kernels-3.10 --repo /tmp/r310 --protocol gate-few.toml --route fused --device cuda --out $WORK/gate-hot' \
        'timeout 150 qkbench gate --against kernels-3.10 --repo /tmp/r310 --protocol gate-few.toml --route fused --cache cold --device cuda --out $WORK/gate-cold' \
        "timeout 90 $l2 --arms larger-programs --geometries goals --tokens 8192 32768 --out \$WORK/larger-hot" \
        "timeout 60 $l2 --arms larger-programs --geometries goals --tokens 8192 --cold --out \$WORK/larger-cold" \
        "timeout 70 $l2 --arms few-programs --geometries qwen3 --tokens 256 512 1024 2048 4096 8192 --out \$WORK/few-qwen3-hot" \
        "timeout 60 $l2 --arms table-cached --geometries d128-dit --tokens 8192 32768 --out \$WORK/cached-hot" \
        "timeout 60 $l2 --arms past-l2 --geometries goals --tokens 512 2048 4096 8192 --cold --out \$WORK/past-l2-cold" \
        "timeout 60 $l2 --arms past-l2 --geometries goals --tokens 512 2048 4096 8192 --out \$WORK/past-l2-hot" \
        "timeout 60 $l2 --arms async-table --geometries d128-dit --tokens 8192 32768 --out \$WORK/async-hot" \
        "timeout 60 $l2 --arms async-table --geometries d128-dit --tokens 8192 32768 --cold --out \$WORK/async-cold" \
        "timeout 120 $l2 --arms program-warps --geometries goals --tokens 512 1024 2048 4096 8192 --out \$WORK/program-warps-hot" \
        "timeout 120 $l2 --arms program-warps --geometries goals --tokens 512 1024 2048 4096 8192 --cold --out \$WORK/program-warps-cold" \
        'timeout 120 python scripts/ncu_goal_cells.py --out $WORK/ncu --cache all' ;;
    v313a) bash "$here/gpu_jobs.sh" "$smi" \
        'git clone -q v312.bundle /tmp/r312 && timeout 150 qkbench gate --against kernels-3.12 --repo /tmp/r312 --protocol gate-few.toml --route fused --device cuda --out $WORK/gate-hot' \
        'timeout 150 qkbench gate --against kernels-3.12 --repo /tmp/r312 --protocol gate-few.toml --route fused --cache cold --device cuda --out $WORK/gate-cold' \
        "timeout 50 $l2 --arms small-cached --geometries d128-dit --tokens 8192 --out \$WORK/small-cached-hot" \
        "timeout 50 $l2 --arms small-cached --geometries d128-dit --tokens 8192 --cold --out \$WORK/small-cached-cold" \
        "timeout 280 $sweep --protocol prefill --route split --route fused --cache cold --tokens 2048 --tokens 32768 --out \$WORK/prefill-cold-2048-32768.json.gz" ;;
    v314a) bash "$here/gpu_jobs.sh" "$smi" \
        "timeout 80 $l2 --arms k-ratio-cut --geometries gqa8 --tokens 2048 4096 8192 --out \$WORK/k-ratio-cut-hot" \
        "timeout 80 $l2 --arms k-ratio-cut --geometries gqa8 --tokens 2048 4096 8192 --cold --out \$WORK/k-ratio-cut-cold" \
        'git clone -q v313.bundle /tmp/r313 && timeout 150 qkbench gate --against kernels-3.13 --repo /tmp/r313 --protocol gate-gqa8.toml --route fused --device cuda --out $WORK/gate-hot' \
        'timeout 150 qkbench gate --against kernels-3.13 --repo /tmp/r313 --protocol gate-gqa8.toml --route fused --cache cold --device cuda --out $WORK/gate-cold' ;;
    odd) bash "$here/gpu_jobs.sh" "$smi" \
        'timeout 150 python -m pytest -q -p no:cacheprovider tests/test_qk_norm_rope.py -k "D96 or D80" > $WORK/pytest-gpu.txt 2>&1; rc=$?; tail -3 $WORK/pytest-gpu.txt; exit $rc' \
        'git clone -q v313.bundle /tmp/rodd && git -C /tmp/rodd fetch -q $PWD/inc.bundle refs/tags/odd-rows:refs/tags/odd-rows && timeout 150 qkbench gate --against odd-rows --repo /tmp/rodd --protocol odd-rotary.toml --route fused --device cuda --out $WORK/gate-hot' \
        'timeout 150 qkbench gate --against odd-rows --repo /tmp/rodd --protocol odd-rotary.toml --route fused --cache cold --device cuda --out $WORK/gate-cold' \
        "timeout 120 $sweep --protocol odd-rotary.toml --route split --route fused --out \$WORK/odd-rotary.json.gz" \
        "timeout 90 $l2 --arms odd-programs --geometries odd --tokens 2048 8192 32768 --out \$WORK/odd-programs-hot" ;;
    v316a) bash "$here/gpu_jobs.sh" "$smi" \
        'timeout 170 python -m pytest -q -p no:cacheprovider -n 4 tests/test_qk_norm_rope.py tests/test_safety.py > $WORK/pytest-gpu.txt 2>&1; rc=$?; tail -3 $WORK/pytest-gpu.txt; exit $rc' \
        'git clone -q v313.bundle /tmp/r316 && git -C /tmp/r316 fetch -q $PWD/inc.bundle refs/tags/kernels-3.15:refs/tags/kernels-3.15 && timeout 130 qkbench gate --against kernels-3.15 --repo /tmp/r316 --protocol gate-lean.toml --route fused --device cuda --out $WORK/gate-hot' \
        'timeout 130 qkbench gate --against kernels-3.15 --repo /tmp/r316 --protocol gate-lean-cold.toml --route fused --cache cold --device cuda --out $WORK/gate-cold' \
        "timeout 60 $l2 --arms k-ratio-cut --geometries gqa8 --tokens 2048 4096 8192 --out \$WORK/k-ratio-cut-hot" \
        "timeout 50 $l2 --arms k-ratio-cut --geometries gqa8 --tokens 2048 4096 8192 --cold --out \$WORK/k-ratio-cut-cold" \
        'timeout 100 python scripts/ncu_goal_cells.py --out $WORK/ncu --cache all' ;;
    v316b) if grep -qE "failed|error" /tmp/qkbench-jobs/pytest-gpu.txt 2>/dev/null; then
            echo "v316a's GPU tests failed: not timing 3.16"; exit 4; fi
        bash "$here/gpu_jobs.sh" "$smi" \
        "timeout 100 $sweep --protocol dit --route split --route fused --route fused-pdl --out \$WORK/dit.json.gz" \
        "timeout 120 $sweep --protocol prefill --route split --route fused --cache cold --tokens 8192 --out \$WORK/prefill-cold-8192.json.gz" \
        "timeout 230 $sweep --protocol prefill --route split --route fused --route fused-pdl --tokens 8192 --tokens 32768 --geometry qwen3-32x8 --geometry qwen3-16x2 --out \$WORK/prefill-d128.json.gz" \
        "timeout 60 $sweep --protocol text-decode --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/text-decode.json.gz" ;;
    tma) bash "$here/gpu_jobs.sh" "$smi" \
        "timeout 90 $l2 --arms tma --geometries d128-dit --tokens 8192 32768 --out \$WORK/tma-hot" \
        "timeout 90 $l2 --arms tma --geometries d128-dit --tokens 8192 32768 --cold --out \$WORK/tma-cold" ;;
    v312d) bash "$here/gpu_jobs.sh" "$smi" \
        'git clone -q v39.bundle /tmp/r39 && timeout 300 qkbench gate --against kernels-3.9 --repo /tmp/r39 --protocol gate-rope.toml --route split --device cuda --out $WORK/gate' \
        'timeout 60 qkbench gate --against kernels-3.9 --repo /tmp/r39 --protocol gate-dit.toml --route split --device cuda --out $WORK/gate' \
        'timeout 150 qkbench gate --against kernels-3.9 --repo /tmp/r39 --protocol gate-rope-decode.toml --route split --device cuda --out $WORK/gate' \
        "timeout 70 python scripts/bench_l2_policy.py --arms copies --geometries d128 --tokens 8192 16384 32768 65536 --rounds 12 --out \$WORK/copies" ;;
    v312e) bash "$here/gpu_jobs.sh" "$smi" \
        "timeout 540 $sweep --protocol prefill --route split --route fused --route fused-pdl --out \$WORK/prefill.json.gz" ;;
    v312f) bash "$here/gpu_jobs.sh" "$smi" \
        "timeout 120 $sweep --protocol dit --route split --route fused --route fused-pdl --out \$WORK/dit.json.gz" \
        "timeout 420 $sweep --protocol prefill --route split --route fused --cache cold --out \$WORK/prefill-cold.json.gz" ;;
    v312g) bash "$here/gpu_jobs.sh" "$smi" \
        "timeout 280 $sweep --protocol qwen3-decode --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/qwen3-decode.json.gz" \
        "timeout 280 $textdecode" ;;
    tune) bash "$here/gpu_jobs.sh" \
        'mkdir -p $WORK/bench && python scripts/bench_kernels.py --out $WORK/bench --budget 80 > $WORK/bench/table.txt 2>&1; rc=$?; tail -32 $WORK/bench/table.txt; exit $rc' \
        "$sweep --protocol prefill $every $large --out \$WORK/prefill.json.gz" \
        "$sweep --protocol dit $every $large --out \$WORK/dit.json.gz" \
        "$sweep --protocol prefill --route split --route fused --cache cold --samples 100 --out \$WORK/prefill-cold.json.gz" \
        "$sweep --protocol qwen3-decode $decode --out \$WORK/qwen3-decode.json.gz" \
        "$sweep --protocol text-decode $decode --out \$WORK/text-decode.json.gz" ;;
    next) bash "$here/gpu_jobs.sh" \
        'timeout 200 python -m pytest -q tests/test_qk_norm_rope.py tests/test_safety.py tests/test_variants.py tests/test_routes.py tests/test_launch.py tests/test_hostcost.py > $WORK/pytest.txt 2>&1; rc=$?; tail -5 $WORK/pytest.txt; exit $rc' \
        'timeout 90 compute-sanitizer --tool memcheck python scripts/sanitize_case.py > $WORK/sanitize.txt 2>&1; tail -12 $WORK/sanitize.txt' \
        'mkdir -p $WORK/bench && python scripts/bench_kernels.py --out $WORK/bench --budget 90 > $WORK/bench/table.txt 2>&1; rc=$?; tail -40 $WORK/bench/table.txt; exit $rc' \
        "$sweep --protocol prefill $every $large --out \$WORK/prefill.json.gz" \
        "$sweep --protocol dit $every $large --out \$WORK/dit.json.gz" ;;
    partial) bash "$here/gpu_jobs.sh" \
        "$sweep --protocol prefill --route split --route fused --isolation inprocess $large --out \$WORK/prefill-partial.json.gz" \
        "$sweep --protocol text-decode --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/text-decode-partial.json.gz" \
        "$sweep --protocol prefill --route split --route fused --cache cold --samples 50 --out \$WORK/prefill-cold-partial.json.gz" ;;
    last) bash "$here/gpu_jobs.sh" \
        "$sweep --protocol qwen3-decode --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/qwen3-decode.json.gz" \
        "$sweep --protocol qwen3vl-mrope --route split --route fused --route fused-pdl --route compiled --isolation inprocess --samples 60 --out \$WORK/qwen3vl-mrope.json.gz" ;;
    decode) bash "$here/gpu_jobs.sh" \
        "$sweep --protocol prefill --route split --route fused --cache cold --samples 100 --out \$WORK/prefill-cold.json.gz" \
        "$sweep --protocol qwen3-decode $decode --out \$WORK/qwen3-decode.json.gz" \
        "$sweep --protocol text-decode $decode --out \$WORK/text-decode.json.gz" \
        "$sweep --protocol qwen3vl-mrope $decode --out \$WORK/qwen3vl-mrope.json.gz" ;;
    v34) bash "$here/gpu_jobs.sh" \
        'timeout 240 python -m pytest -q tests/test_qk_norm_rope.py tests/test_safety.py tests/test_variants.py tests/test_routes.py tests/test_launch.py tests/test_hostcost.py tests/test_plan.py > $WORK/pytest.txt 2>&1; rc=$?; tail -5 $WORK/pytest.txt; exit $rc' \
        'timeout 90 compute-sanitizer --tool memcheck python scripts/sanitize_case.py > $WORK/sanitize.txt 2>&1; tail -12 $WORK/sanitize.txt' \
        'mkdir -p $WORK/bench && python scripts/bench_kernels.py --out $WORK/bench --budget 90 > $WORK/bench/table.txt 2>&1; rc=$?; tail -40 $WORK/bench/table.txt; exit $rc' ;;
    v34b) bash "$here/gpu_jobs.sh" \
        "$sweep --protocol prefill --route split --route fused --isolation inprocess $large --out \$WORK/prefill.json.gz" \
        "$textdecode" \
        "$sweep --protocol prefill --route split --route fused --cache cold --samples 50 --out \$WORK/prefill-cold.json.gz" \
        "$sweep --protocol qwen3-decode --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/qwen3-decode.json.gz" \
        "$sweep --protocol dit --route split --route fused --isolation inprocess $large --out \$WORK/dit.json.gz" \
        "$sweep --protocol qwen3vl-mrope --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/qwen3vl-mrope.json.gz" ;;
    v34c) bash "$here/gpu_jobs.sh" \
        "$sweep --protocol prefill --route split --route fused --isolation inprocess $large --out \$WORK/prefill.json.gz" \
        "$textdecode" \
        "$sweep --protocol qwen3-decode --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/qwen3-decode.json.gz" \
        "$sweep --protocol prefill --route split --route fused --cache cold --samples 50 --out \$WORK/prefill-cold.json.gz" \
        "$sweep --protocol qwen3vl-mrope --route split --route fused --route fused-pdl --isolation inprocess --samples 60 --out \$WORK/qwen3vl-mrope.json.gz" ;;
    v34d) bash "$here/gpu_jobs.sh" \
        "$sweep --protocol prefill $every $large --out \$WORK/prefill-every.json.gz" \
        "$sweep --protocol dit $every $large --out \$WORK/dit-every.json.gz" \
        "$textdecode" ;;
    v35) bash "$here/gpu_jobs.sh" \
        'timeout 170 python -m pytest -q tests/test_qk_norm_rope.py tests/test_plan.py > $WORK/pytest.txt 2>&1; rc=$?; tail -5 $WORK/pytest.txt; exit $rc' \
        'mkdir -p $WORK/l2 && python scripts/bench_l2_policy.py --out $WORK/l2 > $WORK/l2/table.txt 2>&1; rc=$?; cat $WORK/l2/table.txt; exit $rc' \
        "$sweep --protocol prefill --route split --route fused --isolation inprocess $large --out \$WORK/prefill.json.gz" \
        "$sweep --protocol prefill --route split --route fused --cache cold --samples 50 --out \$WORK/prefill-cold.json.gz" ;;
    v35b) bash "$here/gpu_jobs.sh" \
        'mkdir -p $WORK/bench && python scripts/bench_kernels.py --out $WORK/bench --budget 150 > $WORK/bench/table.txt 2>&1; rc=$?; tail -32 $WORK/bench/table.txt; exit $rc' ;;
    method) bash "$here/gpu_jobs.sh" \
        'qkbench env --device cuda > $WORK/env.txt' \
        'qkbench calibrate --device cuda --protocol qwen3-decode --planted 32 --out $WORK' \
        'qkbench calibrate --device cuda --protocol text-decode --planted 32 --out $WORK' \
        "$sweep --protocol qwen3-decode --route split --route fused --route fused-pdl --out \$WORK/qwen3-decode.json.gz" \
        "$sweep --protocol text-decode --route split --route fused --route fused-pdl --out \$WORK/text-decode.json.gz" ;;
    rest) : "${GOOD:?the commit to gate against}" "${SLOW:?the throwaway slowed commit}"
        bash "$here/gpu_jobs.sh" \
        'timeout 90 compute-sanitizer --tool memcheck python scripts/sanitize_case.py > $WORK/sanitize.txt 2>&1; tail -12 $WORK/sanitize.txt' \
        "$sweep --protocol qwen3-decode --route split --route fused --route fused-pdl --out \$WORK/qwen3-decode.json.gz" \
        'git clone -q .qkgit/repo.bundle /tmp/repo && mkdir -p $WORK/gate-same && qkbench gate --device cuda --against HEAD --repo /tmp/repo --protocol qwen3-decode --samples 100 --out $WORK/gate-same --junit $WORK/gate-same/junit.xml --markdown $WORK/gate-same/summary.md' \
        "cd /tmp/repo && git checkout -q $SLOW && python -m pip install -q --no-deps --no-build-isolation . && mkdir -p \$WORK/gate-slowed && QKBENCH_GIT_COMMIT=$SLOW qkbench gate --device cuda --against $GOOD --protocol qwen3-decode --samples 100 --out \$WORK/gate-slowed --junit \$WORK/gate-slowed/junit.xml --markdown \$WORK/gate-slowed/summary.md; rc=\$?; python -m pip install -q --no-deps --no-build-isolation $PWD; exit \$rc" \
        "$sweep --protocol text-decode --route split --route fused --route fused-pdl --samples 100 --out \$WORK/text-decode.json.gz" ;;
esac
