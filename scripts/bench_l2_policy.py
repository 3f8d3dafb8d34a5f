"""Time the fused kernel's plan settings against its default in one interleaved schedule,
with a null arm: what a sequential bench cannot tell apart from the L2 the variant before
left behind.

    python scripts/bench_l2_policy.py [--out DIR] [--rounds 24] [--tokens 8192 ...]
        [--arms k-tiles|copies|copy-warps|pdl|prefetch|past-l2|programs|program-warps
                |larger-programs|few-programs|tiles-3.8|norm|rope|async-table|table-cached
                |persistent|k-ratio-cut|tma|odd-programs]
        [--geometries d128|d128-dit|goals|qwen3|gqa8|odd]
        [--cold] [--route fused|split]

Per shape, each arm is a CUDA graph of 32 launches on buffers of its own: the default plan
twice (``default`` and ``default-again``: identical code, the null arm), and the plan
settings of the ``--arms`` set (``ARM_SETS``). ``--arms copies`` adds, beside the default
twice, what a plain copy of the op's bytes reaches at its own size: one launch that only
copies its rows, at each program size of ``qkbench.limits.ROWS_COPY_BLOCKS``
(``rows-copy-N``), and the harness's same-bytes reference, a ``copy_`` of q and of k
(``copy_``). ``--arms copy-warps`` times the rows' copy at program sizes and warp counts
apart (``rows-copy-N-wW``: N elements a program in W warps). ``--cold`` gives each arm enough buffer
sets to sweep twice the L2 before one comes round again (``qkbench.worker.cold_sets``).
``--route split`` times the split route's three launches instead of the fused kernel, with
the split route's bytes (``traffic.split_bytes``), each arm checked against its output
under the default settings.
Each round visits the arms in an order rotated by one, taking ``--visit`` samples of each.
Reports per arm the median per-call us, its ratio to ``default`` and its share of the
device's copy bandwidth (a 256 MiB ``copy_``) for the bytes it moves; a variant's ratio
means something only where it lies outside the null arm's. Bits are checked against the
split route first, and each copy against its source; exits 1 if any arm fails its check.

``--device cpu --quick`` runs the same code on a tiny shape under Triton's interpreter,
with the L2 taken as one byte so that the rules past the L2 apply (figures meaningless).
"""

import argparse
import functools
import json
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_kernels import (
    OWN_SIZE,
    Shape,
    add_device_options,
    call,
    device_of,
    dit_shape,
    identical,
    interleaved,
    launcher,
    shipped,
)

# An arm key naming a variant of a prototype, ``proto_async_table.py`` or ``proto_tma.py``
# (a CUDA device and D = 128 neox geometries only), which the arm runs instead of the route.
PROTOTYPE = "prototype"
# An arm key: "zero" runs the arm with every position 0, so that every token's table row is
# the same one, found in L1 or the L2 (its bits checked against the split route's at those
# positions): what the table's fetch from memory costs beside the arm as given.
POSITIONS = "positions"
# Program sizes of the fused kernel (elements, warps), each in its own size whatever T.
PROGRAM_SIZES = {
    "e2048-w2": {"elems_per_program": 2048, **OWN_SIZE},
    "e2048-w4": {"elems_per_program": 2048, "elems_per_warp": 512, **OWN_SIZE},
    "e1024-w2": {"elems_per_program": 1024, "elems_per_warp": 512, **OWN_SIZE},
    "e1024-w4": {"elems_per_program": 1024, "elems_per_warp": 256, **OWN_SIZE},
}
ARM_SETS = {  # --arms name -> {arm -> kernels.plan.Settings fields}
    "k-tiles": {
        "default": {}, "default-again": {},
        # Version 3.4's tiles: past the L2, k tiles as large as within it.
        "k-tiles-3.4": {"k_token_ratio_past_l2": 0},
        # Past the L2, k tiles of at most one or four times a q tile's tokens.
        "k-ratio-1": {"k_token_ratio_past_l2": 1}, "k-ratio-4": {"k_token_ratio_past_l2": 4},
        # The rules past the L2 at every T, the L2 taken as one byte: 3.5's k tiles and,
        # since 3.6, the table prefetch where its share rules it in (as ``past-l2``).
        "k-tiles-always": {"l2_bytes": 1},
    },
    "copies": {"default": {}, "default-again": {}},
    # The table row fetched once per token in the rows' layout sliced over the heads, or
    # copied into shared memory as soon as its position is known, the rows with it or not
    # (``proto_async_table.py``).
    "async-table": {
        "default": {}, "default-again": {}, "gluon-sync": {PROTOTYPE: "sync"},
        "gluon-async": {PROTOTYPE: "async"}, "gluon-async-rows": {PROTOTYPE: "async-rows"},
    },
    # The table's fetch isolated: the fused kernel and the prototype's async-rows variant,
    # each also with every position 0 (one table row for every token, always cached).
    "table-cached": {
        "default": {}, "default-again": {}, "default-positions-0": {POSITIONS: "zero"},
        "gluon-async-rows": {PROTOTYPE: "async-rows"},
        "gluon-async-rows-positions-0": {PROTOTYPE: "async-rows", POSITIONS: "zero"},
    },
    # Persistent programs (2 or 4 a multiprocessor), each copying the next item's rows and
    # table rows into shared memory while it computes the current one.
    "persistent": {
        "default": {}, "default-again": {}, "persistent-2": {PROTOTYPE: "persistent-2"},
        "persistent-4": {PROTOTYPE: "persistent-4"},
    },
    # The rows moved by TMA boxes through shared memory (``proto_tma.py``), loads and
    # stores, loads only, or loads only with the table copied into shared memory beside
    # them, and the rows' copy at the default's program size and at the fastest (1024).
    "tma": {
        "default": {}, "default-again": {}, "tma": {PROTOTYPE: "tma"},
        "tma-loads": {PROTOTYPE: "tma-loads"},
        "tma-async-table": {PROTOTYPE: "tma-async-table"},
    },
    # Programmatic Dependent Launch (the ``pdl`` call option) by the plan's rule, and in
    # each of its variants (``plan.Settings.pdl_variant``).
    "pdl": {
        "default": {}, "default-again": {}, "pdl": {"pdl": True},
        "pdl-1": {"pdl": True, "pdl_variant": 1}, "pdl-2": {"pdl": True, "pdl_variant": 2},
    },
    "copy-warps": {"default": {}, "default-again": {}},
    "prefetch": {
        "default": {}, "default-again": {},
        "no-prefetch": {"table_prefetch_per_sm": 0},
        "prefetch-8": {"table_prefetch_per_sm": 8}, "prefetch-32": {"table_prefetch_per_sm": 32},
        # Wherever a launch past the L2 runs in chunks, whatever the table's share.
        "prefetch-any-share": {"table_prefetch_min_share": 0},
    },
    # The rules past the L2 (k tiles of few tokens, the table prefetch) for rows that fit in
    # it, whose rows come from DRAM under ``--cold``.
    "past-l2": {"default": {}, "default-again": {}, "past-l2": {"l2_bytes": 1}},
    # Smaller programs: one launch copying the rows ran fastest at 1024 elements a program.
    "programs": {
        "default": {}, "default-again": {},
        "elems1024": {"elems_per_program": 1024, "partial_elems_per_program": 1024,
                      **OWN_SIZE},
        "elems2048": {"elems_per_program": 2048, **OWN_SIZE},
        "warp512": {"elems_per_warp": 512, **OWN_SIZE},
    },
    # Smaller programs in more warps: the rows' copy runs fastest at 1024 elements a
    # program whatever its warps (1, 2 or 4), and 4096 in two or four warps the slowest.
    # The fused kernel's settings: since 3.10 the split route's launches have their own
    # (``norm``, ``rope``), so under ``--route split`` these arms run the default's code.
    "program-warps": {"default": {}, "default-again": {}, **PROGRAM_SIZES},
    # Smaller programs with the table made free: on the H200 (results/h200/2026-12-06-v312)
    # the rows' copy ran 5.6 points faster at 1024 elements a program than at 4096, the fused
    # kernel 3.4 % slower. Each small size beside itself with every position 0 (one cached
    # table row) says whether the table rows that more, smaller programs fetch are what it
    # loses there.
    "small-cached": {
        "default": {}, "default-again": {}, "default-positions-0": {POSITIONS: "zero"},
        **{f"{size}{suffix}": {**PROGRAM_SIZES[size], **extra}
           for size in ("e1024-w2", "e2048-w4")
           for suffix, extra in (("", {}), ("-positions-0", {POSITIONS: "zero"}))},
    },
    # Larger programs: on the H200 (l2policy-d60a415-program-warps) every smaller size ran
    # 0.6-26 % slower at (32,8) x 128 and DiT, where the H100 read them level. Programs of
    # 8192 elements in 8 warps (64 registers, 4 a multiprocessor: the default's warps and
    # bytes in flight, half its programs, so half the position-then-table chains and
    # reductions per byte) or in 4 (128 registers: 64 elements a thread).
    "larger-programs": {
        "default": {}, "default-again": {},
        "e8192-w8": {"elems_per_program": 8192, **OWN_SIZE},
        "e8192-w4": {"elems_per_program": 8192, "elems_per_warp": 2048, **OWN_SIZE},
    },
    # The rule for launches of few programs (since 3.11) off, with and without PDL.
    "few-programs": {
        "default": {}, "default-again": {}, "few-off": {"few_programs_per_sm": 0},
        "pdl": {"pdl": True}, "pdl-few-off": {"pdl": True, "few_programs_per_sm": 0},
    },
    # 3.14's cut at 24 full-size programs a multiprocessor for launches whose k tiles hold
    # 8 times a q tile's tokens, beside 3.13's 16 for every launch (``--geometries gqa8``).
    "k-ratio-cut": {
        "default": {}, "default-again": {}, "cut-16": {"few_programs_k_ratio": 0},
    },
    # Rotary halves of no power of two (``--geometries odd``), padded pair tiles beside the
    # whole row in partial rotary's programs of 2048 elements (48 registers at Phi-3's
    # (32,32) x 96 where the whole-row tiles of the build before took 72): programs of twice
    # and of half that size.
    "odd-programs": {
        "default": {}, "default-again": {},
        "e4096": {"partial_elems_per_program": 4096, **OWN_SIZE},
        "e1024": {"partial_elems_per_program": 1024, **OWN_SIZE},
    },
    # Tile choices measured while a tile of fewer than its tensor's heads divided by a
    # run-time head-block count (before 3.8), whose balance the constant divisors may move:
    # D = 256 / rotary 64 in two-warp programs of 8 rows or one-warp programs of 2, k tiles
    # of a q tile's tokens, DiT in two-warp programs, every q tile before every k tile.
    "tiles-3.8": {
        "default": {}, "default-again": {},
        "partial-4096": {"partial_elems_per_program": 4096},
        "partial-1024": {"partial_elems_per_program": 1024},
        "k-ratio-1": {"k_token_ratio_past_l2": 1},
        "elems2048": {"elems_per_program": 2048, **OWN_SIZE},
        "q-then-k": {"interleave_qk_span_ratio": 0},
    },
    # The split route's rms_norm programs (run with ``--route split``; the default holds
    # 2048 elements in 4 warps): version 3.8's 4096 in 4 warps, 4096 in 8, 2048 in 2.
    "norm": {
        "default": {}, "default-again": {},
        "norm-3.8": {"norm_elems_per_program": 4096, "norm_elems_per_warp": 1024},
        "norm-w8": {"norm_elems_per_program": 4096, "norm_elems_per_warp": 512},
        "norm-2048-w2": {"norm_elems_per_warp": 1024},
    },
    # The split route's rope programs (``--route split``; the default holds 1024 elements in
    # 2 warps): version 3.9's 4096 in 4 warps, 2048 in 2 and in 4.
    "rope": {
        "default": {}, "default-again": {},
        "rope-3.9": {"rope_elems_per_program": 4096, "rope_elems_per_warp": 1024},
        "rope-2048-w2": {"rope_elems_per_program": 2048, "rope_elems_per_warp": 1024},
        "rope-2048-w4": {"rope_elems_per_program": 2048, "rope_elems_per_warp": 512},
    },
}
# Arm keys that are options of the call (``qk_norm_rope(..., pdl=True)``), not plan settings.
CALL_OPTIONS = ("pdl",)
TOKENS = (512, 2048, 4096, 8192, 16384, 32768, 65536)


# (elements a program, warps) of ``--arms copy-warps``.
COPY_WARPS = ((1024, 1), (1024, 2), (1024, 4), (2048, 1), (2048, 2), (4096, 1), (4096, 2),
              (4096, 4))


def copy_arms(arms: str) -> dict[str, tuple[int, int | None] | None]:
    """The arms of ``--arms`` that copy the rows instead of running the op: each one's
    ``(block, warps)`` of ``qkbench.limits.rows_copy_launch`` (warps None: its default),
    or None for the ``copy_`` of q and of k."""
    from qkbench.limits import ROWS_COPY_BLOCKS

    if arms == "copy-warps":
        # Elements a program and warps apart: the fastest copy so far held 1024 in one warp.
        return {f"rows-copy-{b}-w{w}": (b, w) for b, w in COPY_WARPS}
    if arms == "copies":
        return {**{f"rows-copy-{b}": (b, None) for b in ROWS_COPY_BLOCKS}, "copy_": None}
    if arms == "tma":
        return {f"rows-copy-{b}": (b, None) for b in (1024, 4096)}
    return {}


# (q heads, k heads) at D = 128 whose full-size fused tiles put 8 times a q tile's tokens
# in a k tile (1 and 2 k heads: (16,2) and (8,1) are in the shipped protocols, (32,4) is
# Qwen3-30B-A3B's attention).
GQA8_HEADS = ((8, 1), (16, 2), (32, 4))
# Rotary halves of no power of two: Phi-3-mini's full 96 and StableLM's 20 of 80.
ODD_ROTARY = (("phi3-32x32x96", 32, 32, 96, None), ("stablelm-32x32x80-r20", 32, 32, 80, 20))


def shapes(quick: bool, tokens: list[int], geometries: str = "d128") -> list[Shape]:
    """Tiny under --quick; else the prefill protocol's D = 128 GQA geometries at each of
    ``tokens`` (``d128``), with DiT (``d128-dit``), DiT and every prefill geometry at each
    of ``tokens`` (``goals``), the qwen3-decode protocol's four geometries (``qwen3``), or
    the ``GQA8_HEADS`` geometries (``gqa8``) or the ``ODD_ROTARY`` ones (``odd``)."""
    from qkbench.case import Geometry

    if quick:
        return [Shape(Geometry("tiny", 4, 1, 64), 40)]
    prefill = shipped("prefill")
    long_table = prefill.max_position  # the qwen3 geometries too, as measured since 3.11
    if geometries == "qwen3":
        return [Shape(g, t, long_table) for t in tokens
                for g in shipped("qwen3-decode").geometries]
    if geometries == "goals":
        return [dit_shape(), *(Shape(g, t, long_table) for t in tokens
                               for g in prefill.geometries)]
    if geometries == "odd":
        return [Shape(Geometry(*g), t, long_table) for t in tokens for g in ODD_ROTARY]
    if geometries == "gqa8":
        return [Shape(Geometry(f"gqa8-{hq}x{hk}", hq, hk, 128), t, long_table)
                for t in tokens for hq, hk in GQA8_HEADS]
    d128 = [Shape(g, t, long_table) for g in prefill.geometries if g.head_dim == 128
            for t in tokens]
    return [dit_shape(), *d128] if geometries == "d128-dit" else d128


def prototype(variant: str):
    """The op of the prototype whose variant ``variant`` is."""
    import proto_tma

    if variant in proto_tma.VARIANTS:
        return proto_tma.qk_norm_rope_tma
    from proto_async_table import qk_norm_rope_async

    return qk_norm_rope_async


def copy_launch(size: tuple[int, int | None] | None, inputs, inplace: bool):
    """A launch of the copy arm of ``size`` (``copy_arms``) on buffers of its own, and a
    check that it copies."""
    from qkbench import limits
    from qkbench.case import fresh_copy

    if size is None:
        src = [fresh_copy(x) for x in (inputs.q, inputs.k)]
        dst = [torch.empty_like(x) for x in src]
        return (lambda: [d.copy_(s) for d, s in zip(dst, src, strict=True)],
                lambda: all(torch.equal(d, s) for d, s in zip(dst, src, strict=True)))
    block, warps = size
    src = [x.contiguous().clone() for x in (inputs.q, inputs.k)]
    dst = src if inplace else [torch.empty_like(x) for x in src]
    copied = limits.rows_copy_copies_all(*src, block, warps)
    return limits.rows_copy_launch(*src, *dst, block, warps), lambda: copied


def measure_shape(backend, shape: Shape, arms: dict, copies: dict, rounds: int,
                  visit: int, inner: int, *, cold: bool, copy_gbps: float,
                  route: str = "fused") -> dict:
    from qkbench.case import Case, make_inputs
    from qkbench.kernels import plan, qk_norm_rope, qk_norm_rope_split, traffic
    from qkbench.worker import cold_sets

    op, op_bytes = {"fused": (qk_norm_rope, traffic.fused_bytes),
                    "split": (qk_norm_rope_split, traffic.split_bytes)}[route]
    g = shape.geometry
    inputs = make_inputs(Case(g, shape.tokens, max_position=shape.max_position), 0,
                         backend.device)
    rows = sum(x.numel() * x.element_size() for x in (inputs.q, inputs.k))
    sets = cold_sets(backend, rows) if cold else 1
    reps = max(inner, sets)
    at_zero = replace(inputs, positions=torch.zeros_like(inputs.positions))
    split_out = {None: call(qk_norm_rope_split, inputs, g.inplace),
                 "zero": call(qk_norm_rope_split, at_zero, g.inplace)}
    graphs, checks = [], {}
    for label, arm in arms.items():
        settings = {k: v for k, v in arm.items()
                    if k not in (*CALL_OPTIONS, PROTOTYPE, POSITIONS)}
        options = {k: v for k, v in arm.items() if k in CALL_OPTIONS}
        arm_op = op
        if PROTOTYPE in arm:
            arm_op = functools.partial(prototype(arm[PROTOTYPE]), variant=arm[PROTOTYPE])
        arm_inputs = at_zero if arm.get(POSITIONS) == "zero" else inputs
        with plan.use(**settings):
            checks[label] = identical(call(arm_op, arm_inputs, g.inplace, **options),
                                      split_out[arm.get(POSITIONS)])
            launches = [launcher(arm_op, arm_inputs, g.inplace, **options)
                        for _ in range(sets)]
            for launch in launches:
                launch()
            graphs.append(backend.prepare(launches, reps, label))
    for label, size in copies.items():
        launches, copied = zip(*(copy_launch(size, inputs, g.inplace) for _ in range(sets)),
                               strict=True)
        for launch in launches:
            launch()
        checks[label] = all(check() for check in copied)
        graphs.append(backend.prepare(list(launches), reps, label))
    labels = [*arms, *copies]
    _, us = interleaved(backend, graphs, labels, rounds, visit)
    base = statistics.median(us["default"])
    moved = {label: 2 * rows if label in copies else inputs.call(op_bytes)
             for label in labels}
    return {"shape": shape.name, "cold_sets": sets, "launches_per_replay": reps,
            "checks_passed": checks, "bytes": moved, "us": us,
            "summary": {label: {"median_us": statistics.median(v),
                                "ratio_to_default": statistics.median(v) / base,
                                "share_of_copy": moved[label] / statistics.median(v) * 1e6
                                / (copy_gbps * 1e9)}
                        for label, v in us.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--visit", type=int, default=5)
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--arms", choices=sorted(ARM_SETS), default="k-tiles")
    parser.add_argument("--geometries",
                        choices=("d128", "d128-dit", "goals", "qwen3", "gqa8", "odd"),
                        default="d128")
    parser.add_argument("--cold", action="store_true",
                        help="each arm cycles over buffer sets sweeping twice the L2")
    parser.add_argument("--route", choices=("fused", "split"), default="fused",
                        help="the route the arms' settings plan (split: its rms_norm and rope)")
    add_device_options(parser)
    args = parser.parse_args(argv)
    device = device_of(args)
    from qkbench import limits
    from qkbench.backends import backend_for

    backend = backend_for(device)
    arms = {k: {"l2_bytes": 1, **v} if args.quick else v
            for k, v in ARM_SETS[args.arms].items()}
    copies = copy_arms(args.arms)
    copy_gbps = limits.copy_bandwidth(backend)["gbps"]
    out = Path(args.out) / "bench_l2_policy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"rounds": args.rounds, "visit": args.visit, "route": args.route, "arms": arms,
              "copy_arms": list(copies),
              "cold": args.cold, "copy_gbps": copy_gbps, "shapes": []}
    ok = True
    for shape in shapes(args.quick, args.tokens, args.geometries):
        entry = measure_shape(backend, shape, arms, copies, args.rounds, args.visit,
                              2 if args.quick else 32, cold=args.cold, copy_gbps=copy_gbps,
                              route=args.route)
        result["shapes"].append(entry)
        out.write_text(json.dumps(result, indent=1))
        failed = [label for label, passed in entry["checks_passed"].items() if not passed]
        ok &= not failed
        print(f"{shape.name:22s} " + "  ".join(
            f"{k} {v['median_us']:.2f} ({v['ratio_to_default'] - 1:+.1%}, "
            f"{v['share_of_copy']:.1%})" for k, v in entry["summary"].items())
            + (f"  CHECK FAILED: {', '.join(failed)}" if failed else ""), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
