"""Differential fuzz of the op's two routes: random valid calls, fused against split, bit for bit.

    python scripts/fuzz_routes.py [--seeds START COUNT] [--budget SECONDS] [--out FILE.jsonl]

Each seed draws one call (``random.Random(seed)`` for its parameters,
``torch.Generator().manual_seed(seed)`` for its data) and runs ``qk_norm_rope`` (fused) and
``qk_norm_rope_split`` (split) on fresh identical inputs under the case's tile settings
(``kernels.plan.use``). It checks:

- q's and k's outputs equal between the routes in their bits (NaN bits included);
- each route leaves the memory around q and k untouched (the rest of a packed QKV buffer,
  a head's padding, the skipped tokens of a strided view) and that around given outputs;
- in place, each route returns q and k themselves; out of place, it leaves its inputs
  unchanged and returns the output buffers it was given (new tensors where none was);
- for some in-place cases, fused out of place equals fused in place;
- on well-behaved inputs (finite values, finite weights, a finite table, eps < 1e20): NaN in
  exactly the rotary channels whose position (on its MRoPE axis) lies outside the table,
  and elsewhere ``kernels.reference.qk_norm_rope_reference`` (run on the positions made
  valid) within the harness's worst-element tolerance, as a share of the largest
  |reference| element.

The space: bf16, fp16 and fp32 q and k; fp32 or q-dtype tables; int32 or int64
positions; head dims 2 to 256, powers of two and others (6, 10, 24, 40, 48, 72, 80, 96,
130), full and partial rotary, neox and gptj, plain and offset weights, MRoPE in its three
layouts; 0-40 tokens, optionally as [batch, tokens / batch], 1-6 heads each; q and k
contiguous, inside a packed QKV buffer, head-padded, head-major or token-strided; in place
or out of place into new, NaN-filled or strided buffers, or from a k broadcast over its
tokens; values normal, scaled, with zero rows, huge, subnormal, of mixed exponents or with
NaN and inf; weights and tables with NaN and inf too; eps from 0 to 3e38; positions
strided, shaped like the tokens, and out of the table (negative, past it, int32 and int64
limits); eight tile settings besides the default. Every drawn call is valid, so an
exception in a route is a problem.

Prints one JSON line for each case with problems (its parameters and the problems; rerun
one with ``--seeds SEED 1``), then ``N cases from seed S, M with problems, T s``. Exits 1
if any case had a problem. ``--out`` also writes the problem lines to a file.

CPU only, in Triton's interpreter (set here unless ``TRITON_INTERPRET`` is), so slow: 200
seeds from 1000 took 64 s on a 2-core machine, about 3 cases a second.
"""

import argparse
import json
import os
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from qkbench.accuracy import TOLERANCE, bits, differing_share
from qkbench.case import Inputs

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ROUTES = {"fused": "qk_norm_rope", "split": "qk_norm_rope_split"}
# (head_dim, rotary_dim): full and partial rotary, head dims that are no power of two, and
# rotary halves that are none either (Phi-3's 96, GPT-NeoX's 24 of 96, StableLM's 20 of 80).
HEAD_DIMS = [(2, 2), (4, 4), (8, 8), (8, 4), (16, 16), (16, 8), (16, 4), (32, 32), (32, 16),
             (64, 64), (64, 32), (64, 4), (128, 128), (128, 64), (128, 32), (256, 64),
             (256, 128), (256, 16), (48, 32), (80, 16), (96, 64), (96, 32), (6, 4), (10, 8),
             (130, 128), (24, 16), (40, 32), (72, 64), (96, 96), (96, 24), (80, 20), (80, 80),
             (72, 40), (6, 6), (12, 12), (20, 12), (130, 130)]
TOKENS = [0, 1, 1, 2, 3, 5, 7, 8, 9, 13, 16, 17, 23, 31, 32, 33, 40]
QK_LAYOUTS = ["contig", "packed", "headpad", "headmajor", "tokstride", "packed_pad"]
# Out of place: new outputs ("none"), NaN-filled ones, one strided buffer for both, or new
# outputs from a k whose tokens are one row broadcast (stride 0: read, never written).
OUTPUTS = ["none", "poison", "poison_strided", "broadcast_in"]
EPS = [1e-6, 1e-6, 1e-5, 0.0, 0, 1e-2, 1.0, 1e-30, 1e30, 3e38]  # 0: an int eps
VALUES = ["normal", "normal", "normal", "scaled", "zeros", "huge", "subnormal", "mixed",
          "special"]
WEIGHT_VALUES = ["normal", "normal", "ones", "zeros", "neg1", "huge", "tiny", "special"]
TABLE_VALUES = ["rope", "rope", "random", "special"]
# kernels.plan.Settings changes; the defaults three times, as what a model runs.
SETTINGS = [{}, {}, {},
            {"elems_per_program": 256, "partial_elems_per_program": 256,
             "min_bytes_per_thread": 0},
            {"interleave_qk_span_ratio": 0}, {"interleave_qk_span_ratio": 64},
            {"whole_pass_tile": False}, {"l2_bytes": 1},
            {"min_programs_per_sm": 16, "min_bytes_per_thread": 0},
            {"elems_per_program": 512, "partial_elems_per_program": 512, "elems_per_warp": 64,
             "min_bytes_per_thread": 0, "norm_elems_per_program": 128,
             "norm_elems_per_warp": 64, "rope_elems_per_program": 128,
             "rope_elems_per_warp": 64}]
# Fill values of the memory beside q and k (which no route may write) and the table's rows.
HEAD_PAD, TOKEN_GAP, TABLE_PAD = 7.0, 5.0, 9.0


@dataclass(frozen=True)
class Case:
    """One drawn call: shapes, layouts, options and the kinds of values it gets."""

    seed: int
    dtype: str  # of q and k (a key of DTYPES)
    table_dtype: str  # "fp32", or "act": q's
    positions_dtype: str  # "int32" or "int64"
    head_dim: int
    rotary_dim: int
    style: str
    weight_mode: str
    rotary_dim_none: bool  # rotary_dim passed as None (the whole head)
    mrope_section: tuple[int, int, int] | None
    mrope_layout: str
    tokens: int
    heads_q: int
    heads_k: int
    batch: int | None  # the tokens as [batch, tokens / batch]
    qk_layout: str  # one of QK_LAYOUTS
    inplace: bool
    out: str | None  # out of place: one of OUTPUTS
    eps: float
    values: str  # of q and k: one of VALUES
    weight_values: str
    table_values: str
    max_pos: int
    table_pad: int  # channels past rotary_dim in each table row
    bad_positions: bool  # some positions outside [0, max_pos)
    strided_positions: bool
    lead_positions: bool  # with batch: positions shaped [(3,) batch, tokens / batch]
    settings: dict
    also_out_of_place: bool  # in place: check fused out of place against it
    weight_dtype: str  # "fp32", "bf16", or "act": q's


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and bits (NaN payloads and signed zeros included)."""
    return differing_share(a, b) == 0


def draw_mrope(r: random.Random, rotary_dim: int) -> tuple[tuple[int, int, int] | None, str]:
    """An MRoPE section (lanes of time, height, width, in a random order; some empty) and
    layout for about a third of the cases; else none."""
    if r.random() >= 0.35:
        return None, "sectioned"
    half = rotary_dim // 2
    a = r.randint(0, half)
    b = r.randint(0, half - a)
    section = [a, b, half - a - b]
    r.shuffle(section)
    return tuple(section), r.choice(["sectioned", "interleaved", "glm-interleaved"])


def draw(seed: int) -> Case:
    """The case of ``seed``."""
    r = random.Random(seed)
    dtype = r.choice(list(DTYPES))
    table_dtype = r.choice(["fp32", "act"])
    positions_dtype = r.choice(["int32", "int64"])
    D, R = r.choice(HEAD_DIMS)
    style = r.choice(["neox", "gptj"]) if R >= 4 else "neox"  # gptj pairs need R >= 4
    weight_mode = r.choice(["plain", "offset"])
    rotary_dim_none = R == D and r.random() < 0.5
    mrope_section, mrope_layout = draw_mrope(r, R)
    T = r.choice(TOKENS) if r.random() < 0.9 else r.randint(0, 40)
    heads_q, heads_k = r.randint(1, 6), r.randint(1, 6)
    if D >= 128:  # few rows at large heads: the interpreter's time grows with the elements
        T, heads_q, heads_k = min(T, 12), min(heads_q, 4), min(heads_k, 3)
    batch = None
    if T >= 2 and r.random() < 0.25:
        batch = r.choice([b for b in range(2, T + 1) if T % b == 0])
    qk_layout = r.choice(QK_LAYOUTS)
    inplace = r.random() < 0.5
    out = None if inplace else r.choice(OUTPUTS)
    eps = r.choice(EPS)
    values, weight_values = r.choice(VALUES), r.choice(WEIGHT_VALUES)
    table_values, max_pos = r.choice(TABLE_VALUES), r.choice([1, 2, 5, 16, 64])
    table_pad = r.choice([0, 0, 2, 8])
    bad_positions, strided_positions = r.random() < 0.3, r.random() < 0.25
    lead_positions = r.random() < 0.5
    settings = dict(r.choice(SETTINGS))
    also_out_of_place = r.random() < 0.2
    weight_dtype = r.choice(["fp32", "act", "bf16"])
    return Case(
        seed=seed, dtype=dtype, table_dtype=table_dtype, positions_dtype=positions_dtype,
        head_dim=D, rotary_dim=R, style=style, weight_mode=weight_mode,
        rotary_dim_none=rotary_dim_none, mrope_section=mrope_section,
        mrope_layout=mrope_layout, tokens=T, heads_q=heads_q, heads_k=heads_k, batch=batch,
        qk_layout=qk_layout, inplace=inplace, out=out, eps=eps, values=values,
        weight_values=weight_values, table_values=table_values, max_pos=max_pos,
        table_pad=table_pad, bad_positions=bad_positions, strided_positions=strided_positions,
        lead_positions=lead_positions and batch is not None, settings=settings,
        also_out_of_place=also_out_of_place and inplace, weight_dtype=weight_dtype)


def activations(shape: tuple[int, ...], kind: str, dtype: torch.dtype,
                gen: torch.Generator) -> torch.Tensor:
    """Activations of one kind of VALUES (a normal sample, reshaped), in ``dtype``."""
    x = torch.randn(shape, generator=gen)
    fi = torch.finfo(dtype)
    if kind == "scaled":  # one power of ten, 1e-6 to 1e5, for the whole tensor
        x = x * 10.0 ** torch.randint(-6, 6, (1,), generator=gen).item()
    elif kind == "zeros":  # half the rows zero, all negative zeros half the time
        x[torch.rand(shape[:-1], generator=gen) < 0.5] = 0.0
        if torch.rand(1, generator=gen).item() < 0.5:
            x = -x * 0
    elif kind == "huge":
        x = x.sign() * fi.max * (0.5 + 0.5 * torch.rand(shape, generator=gen))
    elif kind == "subnormal":
        x = x * fi.smallest_normal * torch.rand(shape, generator=gen)
    elif kind == "mixed":  # each row its own exponent, from below the normals to the max
        lo = torch.log2(torch.tensor(fi.smallest_normal)).item() - 8
        hi = torch.log2(torch.tensor(fi.max)).item()
        x = x * torch.exp2(lo + (hi - lo) * torch.rand((*shape[:-1], 1), generator=gen)) * 0.5
    elif kind == "special":  # 5 % each NaN, inf and -inf
        m = torch.rand(shape, generator=gen)
        x = torch.where(m < 0.05, torch.tensor(float("nan")), x)
        x = torch.where((m >= 0.05) & (m < 0.1), torch.tensor(float("inf")), x)
        x = torch.where((m >= 0.1) & (m < 0.15), torch.tensor(float("-inf")), x)
    return x.to(dtype)


def weight(D: int, kind: str, gen: torch.Generator) -> torch.Tensor:
    """A norm weight of one kind of WEIGHT_VALUES, in fp32. Draws its normal sample for
    every kind, so that the data drawn after it do not depend on the kind."""
    w = torch.randn(D, generator=gen)
    if kind == "ones":
        return torch.ones(D)
    if kind == "zeros":
        return torch.zeros(D)
    if kind == "neg1":
        return -torch.ones(D)
    if kind == "huge":
        return w * 1e30
    if kind == "tiny":
        return w * 1e-40  # fp32 subnormals, zero in fp16
    if kind == "special":
        w[0], w[-1] = float("nan"), float("inf")
    return w


def qk_tensors(case: Case, gen: torch.Generator
               ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """q and k in the case's layout, and the views of their buffers that are neither."""
    T, HQ, HK, D = case.tokens, case.heads_q, case.heads_k, case.head_dim
    dtype = DTYPES[case.dtype]
    q_values = activations((T, HQ, D), case.values, dtype, gen)
    k_values = activations((T, HK, D), case.values, dtype, gen)
    layout = case.qk_layout
    if layout == "contig":
        q, k, around = q_values, k_values, ()
    elif layout == "headmajor":  # heads outermost in memory
        q = q_values.transpose(0, 1).contiguous().transpose(0, 1)
        k = k_values.transpose(0, 1).contiguous().transpose(0, 1)
        around = ()
    elif layout in ("packed", "packed_pad"):  # [q | k | v (| 3 heads of padding)]
        pad = 3 if layout == "packed_pad" else 0
        qkv = activations((T, HQ + 2 * HK + pad, D), "normal", dtype, gen)
        q, k, around = qkv[:, :HQ], qkv[:, HQ:HQ + HK], (qkv[:, HQ + HK:],)
    elif layout == "headpad":  # q the first D channels of its rows, k the last
        q_rows = torch.full((T, HQ, D + 6), HEAD_PAD, dtype=dtype)
        k_rows = torch.full((T, HK, D + 2), HEAD_PAD, dtype=dtype)
        q, k, around = q_rows[..., :D], k_rows[..., 2:], (q_rows[..., D:], k_rows[..., :2])
    else:  # tokstride: every second token of q's buffer, every third of k's
        q_rows = torch.full((2 * T, HQ, D), TOKEN_GAP, dtype=dtype)
        k_rows = torch.full((3 * T, HK, D), TOKEN_GAP, dtype=dtype)
        q, k = q_rows[::2], k_rows[1::3]
        around = (q_rows[1::2], k_rows[0::3], k_rows[2::3])
    q.copy_(q_values)  # into the layout's memory (nothing to do where q is q_values)
    k.copy_(k_values)
    if case.batch:  # a view: the token dims still merge into one stride
        q = q.unflatten(0, (case.batch, T // case.batch))
        k = k.unflatten(0, (case.batch, T // case.batch))
    return q, k, around


def broadcast_tokens(k: torch.Tensor) -> torch.Tensor:
    """``k`` with every token reading its first token's rows (token strides 0)."""
    rows = k.reshape(-1, *k.shape[-2:])
    if rows.shape[0] == 0:
        return k
    return rows[:1].expand(rows.shape[0], -1, -1).view(k.shape)


def positions(case: Case, gen: torch.Generator) -> torch.Tensor:
    """The positions (``[3, T]`` with MRoPE, else ``[T]``; the token dims as q's with
    ``lead_positions``), some out of the table with ``bad_positions``."""
    T, max_pos = case.tokens, case.max_pos
    dtype = torch.int32 if case.positions_dtype == "int32" else torch.int64
    axes = 3 if case.mrope_section is not None else 1
    pos = torch.randint(0, max_pos, (axes, T), generator=gen, dtype=torch.int64)
    if case.bad_positions and T:
        bad = [-1, max_pos, max_pos + 1000, -(2**31), 2**31 - 1]
        if dtype == torch.int64:
            bad += [2**40, -(2**62), 2**63 - 1]
        bad = torch.tensor(bad)
        chosen = torch.rand(axes, T, generator=gen) < 0.3
        pos = torch.where(chosen, bad[torch.randint(0, len(bad), (axes, T), generator=gen)], pos)
    pos = pos.to(dtype)
    if case.strided_positions:  # every second column of a buffer with a row before them
        buffer = torch.zeros(axes + 1, 2 * T, dtype=dtype)
        buffer[1:, ::2] = pos
        pos = buffer[1:, ::2]
    if case.mrope_section is None:
        pos = pos[0]
    if case.lead_positions:
        pos = pos.unflatten(-1, (case.batch, T // case.batch))
    return pos


def cos_sin_cache(case: Case, gen: torch.Generator) -> torch.Tensor:
    """The ``[max_pos, rotary_dim]`` table: RoPE's own, random, or RoPE's with NaN, inf
    and 1e38 (inf in half precision); with ``table_pad``, a view of wider rows."""
    R, max_pos = case.rotary_dim, case.max_pos
    dtype = torch.float32 if case.table_dtype == "fp32" else DTYPES[case.dtype]
    if case.table_values == "random":
        table = torch.randn(max_pos, R, generator=gen)
    else:
        inv_freq = 1e4 ** (-torch.arange(0, R, 2, dtype=torch.float64) / R)
        angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq
        table = torch.cat((angles.cos(), angles.sin()), -1).float()
        if case.table_values == "special":
            table[0, 0], table[-1, -1] = float("nan"), float("inf")
            table[max_pos // 2, R // 2] = 1e38
    table = table.to(dtype)
    if case.table_pad:
        rows = torch.full((max_pos, R + case.table_pad), TABLE_PAD, dtype=dtype)
        rows[:, :R] = table
        table = rows[:, :R]
    return table


def make_inputs(case: Case) -> tuple[Inputs, tuple[torch.Tensor, ...]]:
    """The case's arguments, fresh: the same bits on every call; and the views of q's and
    k's buffers that are neither."""
    gen = torch.Generator().manual_seed(case.seed)
    q, k, around = qk_tensors(case, gen)
    weight_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16,
                    "act": DTYPES[case.dtype]}[case.weight_dtype]
    q_weight = weight(case.head_dim, case.weight_values, gen).to(weight_dtype)
    k_weight = weight(case.head_dim, case.weight_values, gen).to(weight_dtype)
    pos = positions(case, gen)
    table = cos_sin_cache(case, gen)
    if case.out == "broadcast_in":
        k = broadcast_tokens(k)
    return Inputs(q, k, q_weight, k_weight, pos, table), around


def outputs(case: Case, q: torch.Tensor, k: torch.Tensor
            ) -> tuple[torch.Tensor | None, torch.Tensor | None, tuple[torch.Tensor, ...]]:
    """``q_out`` and ``k_out`` to pass (None: the route makes them), and the views of their
    buffer that are neither."""
    if case.out == "poison":
        return torch.full_like(q, float("nan")), torch.full_like(k, float("nan")), ()
    if case.out == "poison_strided":  # [..., q heads | k heads | one spare head, D]
        HQ, HK = q.shape[-2], k.shape[-2]
        buffer = torch.full((*q.shape[:-2], HQ + HK + 1, q.shape[-1]), float("nan"),
                            dtype=q.dtype)
        return buffer[..., :HQ, :], buffer[..., HQ:HQ + HK, :], (buffer[..., HQ + HK:, :],)
    return None, None, ()


def options(case: Case) -> dict:
    """The op's keyword options of the case, less its outputs."""
    return {"eps": case.eps, "rotary_dim": None if case.rotary_dim_none else case.rotary_dim,
            "style": case.style, "weight_mode": case.weight_mode,
            "mrope_section": case.mrope_section, "mrope_layout": case.mrope_layout,
            "inplace": case.inplace}


def run_route(route: str, case: Case, label: str
              ) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, list[str]]:
    """One call of ``route`` on fresh inputs: copies of what it returned (None if it raised),
    and the problems of this call alone, each starting with ``label``."""
    from qkbench import kernels

    inputs, around = make_inputs(case)
    q_out, k_out, out_around = outputs(case, inputs.q, inputs.k)
    q_before, k_before = inputs.q.clone(), inputs.k.clone()
    around_before = [x.clone() for x in around]
    out_around_before = [x.clone() for x in out_around]
    op = getattr(kernels, ROUTES[route])  # looked up per call, so that a patch takes effect
    try:
        returned = inputs.call(op, q_out=q_out, k_out=k_out, **options(case))
    except Exception as e:  # a valid call that raised: this case's problem
        return None, [f"{label} raised {type(e).__name__}: {str(e)[:300]}"]
    problems = []
    q, k = returned
    if case.inplace:
        if q is not inputs.q or k is not inputs.k:
            problems.append(f"{label}: in place returned other tensors than q and k")
    else:
        if not (same(inputs.q, q_before) and same(inputs.k, k_before)):
            problems.append(f"{label}: out of place changed q or k")
        if q_out is not None and (q is not q_out or k is not k_out):
            problems.append(f"{label}: did not return the q_out and k_out it was given")
        if q_out is None and (q is inputs.q or k is inputs.k):
            problems.append(f"{label}: out of place returned an input")
    # Equal before and after in each route, so equal between the routes too.
    for where, views, was in (("q and k", around, around_before),
                              ("q_out and k_out", out_around, out_around_before)):
        if not all(same(x, b) for x, b in zip(views, was, strict=True)):
            problems.append(f"{label}: wrote outside {where} in their buffers")
    return (q.clone(), k.clone()), problems


def well_behaved(case: Case) -> bool:
    """Whether the case's outputs can be held against the reference: finite activations
    and weights of usual sizes, RoPE's or a random finite table, a usual eps, a token."""
    return (case.values in ("normal", "scaled") and case.weight_values in ("normal", "ones")
            and case.table_values != "special" and case.tokens > 0 and case.eps < 1e20)


def defined_channels(case: Case, valid: torch.Tensor) -> torch.Tensor:
    """``[T, D]``: where a token's channel has a value, given ``valid`` (``[axes, T]``,
    which positions lie in the table): its pass-through channels, and the rotary channels
    whose lane reads a valid position."""
    half = case.rotary_dim // 2
    if case.mrope_section is None:
        lanes = valid[0][:, None].expand(-1, half)
    else:
        from qkbench.kernels.mrope import axis_map

        lanes = valid[torch.tensor(axis_map(case.mrope_section, case.mrope_layout))].T
    # A lane's two channels: i and i + half (neox), or 2i and 2i + 1 (gptj).
    rotary = lanes.repeat(1, 2) if case.style == "neox" else lanes.repeat_interleave(2, -1)
    passthrough = torch.ones(rotary.shape[0], case.head_dim - case.rotary_dim, dtype=torch.bool)
    return torch.cat([rotary, passthrough], -1)


def reference_problems(case: Case, q: torch.Tensor, k: torch.Tensor) -> list[str]:
    """How the outputs ``q, k`` of a well-behaved case depart from NaN in the channels of
    out-of-range positions and from the reference elsewhere."""
    from qkbench.kernels import reference

    inputs, _ = make_inputs(case)
    pos = inputs.positions
    flat = pos.reshape(3 if case.mrope_section is not None else 1, -1)
    valid = (flat >= 0) & (flat < case.max_pos)
    in_range = torch.where(valid, flat, 0).reshape(pos.shape)
    ref_options = {name: value for name, value in options(case).items() if name != "inplace"}
    try:
        expected = inputs.call(reference.qk_norm_rope_reference, positions=in_range,
                               **ref_options)
    except Exception as e:  # a call both routes took: the reference's problem, reported
        return [f"reference raised {type(e).__name__}: {str(e)[:300]}"]
    defined = defined_channels(case, valid)[:, None, :]
    tolerance = TOLERANCE[q.dtype][0]  # worst element, as a share of the largest |reference|
    problems = []
    for name, out, ref in (("q", q, expected[0]), ("k", k, expected[1])):
        out = out.reshape(-1, *out.shape[-2:]).float()
        ref = ref.reshape(-1, *ref.shape[-2:]).float()
        defined_here = defined.expand_as(out)
        not_nan = (~out[~defined_here].isnan()).sum().item()
        if not_nan:
            problems.append(f"{name}: {not_nan} rotary channels of out-of-range positions "
                            "are not NaN")
        lost = (defined_here & ref.isfinite() & ~out.isfinite()).sum().item()
        if lost:
            problems.append(f"{name}: {lost} elements not finite where the reference is")
        both = defined_here & ref.isfinite() & out.isfinite()
        if both.any():
            scale = ref[both].abs().amax().clamp_min(1e-30)
            error = ((out[both] - ref[both]).abs().amax() / scale).item()
            if error > tolerance:
                problems.append(f"{name}: {error:.3g} of the largest |reference| from the "
                                f"reference (tolerance {tolerance:.3g})")
    return problems


def check(case: Case) -> list[str]:
    """Every problem of the case: the routes' own, their bits apart, and, where the case
    allows, fused out of place against in place and the outputs against the reference."""
    from qkbench.kernels import plan

    # The interpreter computes in numpy, which warns on the overflows the values invite.
    with plan.use(**case.settings), np.errstate(all="ignore"):
        fused, problems = run_route("fused", case, "fused")
        split, split_problems = run_route("split", case, "split")
        problems += split_problems
        if fused is None or split is None:
            return problems
        for name, a, b in zip("qk", fused, split, strict=True):
            if not same(a, b):
                differ = (bits(a) != bits(b)).sum().item()
                problems.append(f"{name} bits differ between fused and split: {differ} of "
                                f"{a.numel()} elements")
        if case.also_out_of_place:
            apart = replace(case, inplace=False, out="poison", also_out_of_place=False)
            out_of_place, oop_problems = run_route("fused", apart, "fused out of place")
            problems += oop_problems
            if out_of_place is not None and not all(
                    same(a, b) for a, b in zip(out_of_place, fused, strict=True)):
                problems.append("fused out of place differs from fused in place")
        if well_behaved(case):
            problems += reference_problems(case, *fused)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs=2, type=int, default=[0, 100],
                        metavar=("START", "COUNT"), help="the seeds START to START + COUNT - 1")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds after which no new case is started")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the problem lines to this file (JSON lines)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are first imported
    start, count = args.seeds
    started = time.perf_counter()
    cases = with_problems = 0
    with open(args.out, "w") if args.out else nullcontext() as out:
        for seed in range(start, start + count):
            if args.budget is not None and time.perf_counter() - started >= args.budget:
                break
            case = draw(seed)
            problems = check(case)
            cases += 1
            if problems:
                with_problems += 1
                line = json.dumps({"case": asdict(case), "problems": problems})
                print(line, flush=True)
                if out:
                    out.write(line + "\n")
                    out.flush()  # a run cut off keeps the lines it printed
    print(f"{cases} cases from seed {start}, {with_problems} with problems, "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return 1 if with_problems else 0


if __name__ == "__main__":
    sys.exit(main())
