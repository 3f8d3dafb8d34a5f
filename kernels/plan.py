"""The launch heuristic: how many tokens and heads one program holds, and how many warps.

A deterministic rule instead of autotuning, so that a CUDA graph can be captured on the
first call and the chosen configuration can be recorded beside every measurement. Its
knobs are ``Settings``; ``use`` swaps them for a measurement of alternatives.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import cache

import torch

from . import launch


@dataclass(frozen=True)
class Settings:
    # Elements (padded channels x rows) one program holds; about 32 per thread at 4 warps.
    elems_per_program: int = 4096
    # The same for the fused kernel with partial rotary, whose rows are also loaded whole
    # (78 registers at the two-warp tiles of D = 256 / rotary 64): one-warp programs of 4
    # rows beat two-warp ones of 8 by 3-8 % at T >= 2048 on the H200 (docs/kernel-notes.md,
    # version 3.2), while at D = 128 (and DiT) halving the program lost 4-20 %. A PDL
    # launch that reads its table before it waits (``pdl_variant`` 1) keeps
    # elems_per_program: with one-warp programs, each waiting on the kernel before it, it
    # ran 27-50 % slower than with two-warp ones at text-decode T = 512-1024 (version 3.2).
    # One that waits first (2) takes this size.
    partial_elems_per_program: int = 2048
    # Elements per warp: the warp count is the program's elements over this (1 to 8).
    elems_per_warp: int = 1024
    # The split route's rms_norm programs: elements a program and a warp, so 16 elements
    # a thread (two 16-byte vectors). At 32 (the fused kernel's 4096 in 4 warps) ptxas
    # issues some of a thread's row loads only after the first row's sum of squares
    # (results/tuning/2026-12-04-kernel-ir-norm-3.7-3.8-3.9.txt). On the H200
    # (results/tuning/2026-12-04-h200/l2policy-1f43122-norm-*, the split route timed
    # whole, null arm within -0.3 / +0.4 %) 2048 in 4 warps ran 0.5-2.8 % faster at
    # T = 8192 and 32768 and DiT, hot and cold, but for (16,2) x 128 at T = 8192 hot (in
    # the L2: -0.1 %); 4096 in 8 warps, whose row loads also all come first, -0.3 to
    # +0.8 %, and 2048 in 2 warps -1.3 to +1.1 %.
    norm_elems_per_program: int = 2048
    norm_elems_per_warp: int = 512
    # The split route's rope programs, the same way. On the H200 (results/h200/
    # 2026-12-05-held/rope-programs, the split route timed whole, null arm within -0.3 /
    # +1.1 %) 1024 elements in 2 warps ran 0.8-3.2 % faster than 3.9's 4096 in 4 at all nine
    # cells (DiT, the four prefill geometries at T = 8192 and 32768); 2048 in 4 warps ran up
    # to 4.1 % faster at D = 128 but 2.0 % slower at (24,4) x 256 T = 32768, 2048 in 2 within
    # +0.2 / -3.1 %, 1024 in 4 the slowest. Gated against 3.9 on an H100 (results/h100/
    # 2026-12-05-v310-gate): faster at 18 cells (8 at decode widths), slower by 0.5-0.8 % at
    # 3 ((32,8) x 128 T = 1024 and 2048, and (16,2) x 128 T = 8192 within that card's L2).
    # No rule by T: at T = 512-4096 on an H100 (results/h100/2026-12-05-v310-mid-t, null arm
    # -2.0 / +1.1 %) 3.9's size was 2.8-13.8 % slower at six cells and at most 1.0 % faster,
    # and no other size led past the null width at more than one cell.
    rope_elems_per_program: int = 1024
    rope_elems_per_warp: int = 512
    # Programs per multiprocessor below which rows are spread thinner, so that decode widths
    # keep the whole chip busy instead of leaving it idle behind a few large tiles.
    min_programs_per_sm: float = 4
    # A full-rotary fused launch whose tiles of ``elems_per_program`` number at least
    # ``min_programs_per_sm`` (so not spread) but fewer than this many a multiprocessor -- a
    # few waves, whose ramp and tail weigh -- takes programs of ``few_elems_per_program``
    # in warps of ``few_elems_per_warp`` (16 elements a thread instead of 32). On an H100
    # (results/tuning/2026-12-05-h100-program-warps, null arms at D = 128 and DiT within
    # -0.8 / +1.1 %) 2048
    # elements in 4 warps ran 0.0-9.8 % faster hot and 0.7-7.0 % cold at the six cells
    # of 4-20 programs a multiprocessor ((32,8) x 128 at T = 512-2048, (16,2) x 128 at
    # T = 1024-4096), and 0.1-3.5 % slower at 39 and more ((32,8) x 128 from T = 4096,
    # DiT); (16,2) x 128 at T = 8192 (35) gained cold (-2.4 %) and lost hot (+1.8 %).
    # Partial rotary, already at 2048 elements in 2 warps, lost 1.4-3.3 % in 4 warps. The
    # rule, gated against 3.10 on an H100 (results/h100/2026-12-05-v311, T = 256-8192 at
    # (32,8), (16,2) and (64,8) x 128): faster at all 9 cells it changes, 0.8-9.9 % hot and
    # cold, but (64,8) T = 1024 hot (-0.2 %, unresolved); the 9 it leaves alone within
    # 0.11 %. With PDL it is mixed: (32,8) x 128 at T = 512 ran 2.0-5.1 % slower than
    # 4096-element programs with PDL, (16,8) x 128 at T = 1024 10.5-15.3 % faster. On the
    # H200 (results/h200/2026-12-06-v312, the rule gated against 3.10) it gained 3.4-7.2 %
    # hot and cold at 4.4-9.7 programs a multiprocessor (its bench: 2.4-10.3 % up to 11.6),
    # but regressed hot at 17.5-19.4:
    # (32,8) x 128 T = 2048 +4.2 %, (64,8) x 128 T = 1024 +4.7 % (cold +0.9 / +0.7 %), and
    # its own bench read the rule 4.1-5.7 % slower at those two and at 23.3 ((16,8) x 128
    # T = 4096), 1.5 % faster at (8,1) x 128 T = 8192 (17.5). So the cut sits between the
    # two (kernels 3.13). Its gate against 3.12 (results/h200/2026-12-07-v313a): hot -4.7 %
    # at (32,8) x 128 T = 2048, -5.0 % at (64,8) x 128 T = 1024, -1.8 % at (16,2) x 128
    # T = 4096; cold -0.8 / -0.4 %, but +3.8 % at (16,2) x 128 T = 4096 (a FAIL), as
    # predicted. On the H100 (results/h100/2026-12-07-v313a) it costs +0.9 / +0.7 % at the
    # first two and +2.9 % hot, +4.4 % cold at (16,2) x 128 T = 4096 (a FAIL hot and cold).
    few_programs_per_sm: float = 16
    # A launch whose full-size k tiles hold at least ``few_programs_k_ratio`` times a q
    # tile's tokens (GQA of 8 q heads a k head at D = 128: q tiles of 1-4 tokens, k tiles
    # of 8-32, run after every q tile, ``qk_grid``) takes the smaller programs below
    # ``few_programs_k_ratio_scale`` times as many a multiprocessor (24; kernels 3.14). On
    # the H200 smaller programs won at the two such cells read at 17.5 ((16,2) x 128
    # T = 4096 cold -3.8 %, (8,1) x 128 T = 8192 -1.5 %) and lost at the three 1:4 ones
    # at 17.5-23.3 (+4.1-5.7 % hot). Gated against 3.13 on an H100
    # (results/h100/2026-12-07-v314a): faster at all three such cells of T = 2048-8192,
    # 2.4-5.6 % hot and 1.9-4.1 % cold; not yet on the H200.
    few_programs_k_ratio: int = 8
    few_programs_k_ratio_scale: float = 1.5
    few_elems_per_program: int = 2048
    few_elems_per_warp: int = 512
    # A PDL launch of variant 1 (``pdl_variant``) keeps its full-size programs where they
    # hold at most this many warps a multiprocessor: one wave of them. Variant 1 holds 95
    # registers at 4096 elements in 4 warps, so 5 programs a multiprocessor; the smaller
    # programs take 63, 8 a multiprocessor, and twice the programs then make 1.1-1.2
    # waves (results/tuning/2026-12-05-kernel-ir-few-programs.txt). On an H100
    # (results/h100/2026-12-05-v311, with PDL): where the full-size launch was one wave,
    # the smaller programs ran 2.0-5.1 % slower at (32,8) x 128 T = 512 and +3.2 / -0.8 %
    # (hot / cold) at (64,8) x 128 T = 256 (fused-pdl in qwen3-decode against 3.10's: +4.7 and
    # +2.8 %), level at (16,2) x 128 T = 1024, -9.0 / +1.7 % at (8,1) x 128 T = 2048; where
    # it was 1.2 waves ((16,8) x 128 T = 1024) they ran 10.5-15.3 % faster.
    few_programs_pdl_wave_warps_per_sm: float = 20
    # Largest share of padded (masked) heads a head block may carry.
    max_head_padding: float = 1.125
    # Rows are never spread so thin that a warp's thread holds less than this many bytes of
    # a row tile: below 16 the loads and stores stop being 16-byte vectors.
    min_bytes_per_thread: int = 16
    # Partial rotary: the fused kernel loads the whole row as its pass-through tile (the
    # rotary channels again, from L1), so its 16-byte loads have no idle lanes, and sums
    # its squares in one tree, as rms_norm does, instead of rebuilding the tree from the
    # rotary and pass-through tiles (fewer layout conversions: 4 barriers instead of 6 at
    # the one-warp tiles of D = 256 / rotary 64: scripts/kernel_ir.py,
    # results/tuning/2026-12-03-kernel-ir-v32.txt). False rebuilds it (version 3).
    whole_pass_tile: bool = True
    # A launch of q and k tiles runs them in chunks of tokens, each chunk's q tiles then its
    # k tiles, where one tensor's tiles hold at most this many times the other's tokens
    # (0: never): every q tile then every k tile instead. On the H200 (the bench in
    # results/h200/2026-12-03-v34/) chunks were up to 4.7 % faster in 17 of 19 cells whose
    # tiles' tokens are equal or 1:2 (decode, DiT, D = 256 / rotary 64; the other two
    # within 0.7 %), and 1.8-5.3 % slower at T = 8192 with D = 128's 1:4 and 1:8 tiles
    # ((1,32)/(4,8), (2,16)/(16,2)) (``qk_grid``).
    interleave_qk_span_ratio: int = 2
    # Past the L2 (q's and k's rows together larger than the device's L2), the fused
    # launch cuts its k tiles to at most this many times a q tile's tokens, so that GQA's
    # k tiles run in chunks beside the q tiles of the same tokens (``qk_grid``) and find
    # those tokens' table rows still in L2 instead of reading them from DRAM again (0:
    # never). On the H200 (results/tuning/2026-12-04-h200/l2policy-c816262-k-ratios, arms
    # of identical code within -2.0 / +1.4 %): 1.6-3.2 % faster than 3.4's k tiles at
    # (32,8) x 128, T = 8192-65536, and 3.8-5.4 % at (16,2) x 128, T = 16384-65536; ratios
    # 1 and 4 slower than 2; below the L2, whose rows stay there between launches, the
    # same tiles up to 10.2 % slower.
    k_token_ratio_past_l2: int = 2
    # The L2 size that ``past_l2`` compares with (0: the device's own; the CPU has none).
    l2_bytes: int = 0
    # Past the L2, where a token's table row is at least ``table_prefetch_min_share`` of
    # the bytes the token moves (its q and k rows read and written, and the row), a fused
    # launch whose tiles run in chunks has the first tile program of every
    # ``PREFETCH_TOKENS`` tokens, its own tile stored, ask the L2 for the table rows of the
    # tokens about ``table_prefetch_per_sm`` programs per multiprocessor later
    # (``table_prefetch``; 0: never). On the H200 (results/tuning/2026-12-04-h200/,
    # l2policy-3944a7b-prefetch-rule, null arm within -0.4 / +1.2 %): without it (16,2) x 128
    # (the table 5.3 % of the bytes) ran 2.7-3.2 % slower at T = 16384-65536, 8 ahead
    # 1.4-1.7 % slower than 16, 32 within 0.5 %; where the table is 2.4 % ((32,8) x 128) or
    # 0.9 % ((24,4) x 256 / rotary 64) the prefetch cost 2.6-4.1 % (and 2.1-11.1 % at DiT in
    # l2policy-cc5c7af-prefetch-in-tiles). The 4 % sits between those shares unmeasured.
    table_prefetch_per_sm: float = 16
    table_prefetch_min_share: float = 0.04
    # A PDL launch of more warps than this a multiprocessor waits for the launch before it
    # first and lets the next start as its programs exit (``pdl_variant`` 2); a smaller one
    # (decode widths) reads its positions, table rows and weights, waits, loads its rows
    # and then lets the next launch start (1). On the H200 (results/tuning/2026-12-04-h200/
    # l2policy-a92be0a-pdl, the null arm within -3.0 / +1.2 %): at T >= 8192 and DiT, 1
    # ran 4.4-18.0 % slower than no PDL (95 registers instead of 64 at (32,8) x 128: the
    # table's held across the wait) and 2 within -5.6 / +0.5 %; from T = 512 to 2048, 1
    # was faster (once tied) wherever the launch held 9-39 warps a multiprocessor and 2
    # wherever it held 54-109. 48 is a cut between the two measured ranges, not a residency
    # limit (at 64 registers an H200 holds 32 warps of these programs a multiprocessor). At
    # T = 64 (1 kept) 2 was faster at three geometries of four.
    pdl_wait_first_warps_per_sm: int = 48
    # The variant every PDL launch takes (0: by the rule above).
    pdl_variant: int = 0


SETTINGS = Settings()


@contextmanager
def use(**changes) -> Iterator[Settings]:
    """Plan with ``SETTINGS`` changed as given inside the block (resolved calls are
    forgotten on entry and exit, so that every call re-plans)."""
    global SETTINGS
    before = SETTINGS
    SETTINGS = replace(before, **changes)
    launch.clear()
    try:
        yield SETTINGS
    finally:
        SETTINGS = before
        launch.clear()


@dataclass(frozen=True)
class TilePlan:
    """How one tensor's ``[T, H, width]`` rows are cut into programs."""

    block_t: int
    block_h: int
    head_blocks: int
    programs: int
    num_warps: int

    def as_dict(self) -> dict:
        return asdict(self)


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def pair_width(rotary_dim: int) -> int:
    """The channels a row's rotary pair tiles span: each half padded to a power of two."""
    return 2 * next_pow2(rotary_dim // 2)


def _head_block(heads: int, cap: int, padding: float) -> int:
    bh = min(next_pow2(heads), cap)
    while bh > 1 and -(-heads // bh) * bh > heads * padding:
        bh //= 2
    return bh


def plan_tiles(tokens: int, heads: int, width: int, element_size: int,
               min_programs: int, elems_per_program: int | None = None,
               elems_per_warp: int | None = None) -> TilePlan:
    """Tile ``tokens x heads`` rows of ``width`` padded channels into programs of at most
    ``elems_per_program`` elements, ``elems_per_warp`` a warp (``Settings``' unless given)."""
    s = SETTINGS
    elems = elems_per_program or s.elems_per_program
    rows_cap = 1 << max(0, (elems // width).bit_length() - 1)
    bh = _head_block(heads, rows_cap, s.max_head_padding)
    bt = max(1, min(rows_cap // bh, next_pow2(tokens)))
    # One warp's threads, each holding min_bytes_per_thread of the tile.
    min_rows = next_pow2(-(-32 * s.min_bytes_per_thread // (element_size * width)))

    def programs(bt: int, bh: int) -> int:
        return -(-tokens // bt) * -(-heads // bh)

    while programs(bt, bh) < min_programs and bt > 1 and bt * bh > min_rows:
        bt //= 2
    while programs(bt, bh) < min_programs and bh > 1 and bt * bh > min_rows:
        bh //= 2
    warps = max(1, min(8, next_pow2(bt * bh * width // (elems_per_warp or s.elems_per_warp))))
    return TilePlan(bt, bh, -(-heads // bh), programs(bt, bh), warps)


def qk_grid(tokens: int, plan_q: TilePlan, plan_k: TilePlan) -> tuple[int, int, int]:
    """``(programs, q_chunk, k_chunk)`` of a launch of ``plan_q``'s and ``plan_k``'s tiles:
    chunks of ``max(block_t)`` tokens, each ``q_chunk`` q tiles then ``k_chunk`` k tiles
    (``tiles.qk_tile``; a last chunk past ``tokens`` holds wholly masked tiles); past
    ``Settings.interleave_qk_span_ratio``, every q tile then every k tile, chunks
    ``(0, 0)``."""
    span = max(plan_q.block_t, plan_k.block_t)
    if span > SETTINGS.interleave_qk_span_ratio * min(plan_q.block_t, plan_k.block_t):
        return plan_q.programs + plan_k.programs, 0, 0
    q_chunk = span // plan_q.block_t * plan_q.head_blocks
    k_chunk = span // plan_k.block_t * plan_k.head_blocks
    return -(-tokens // span) * (q_chunk + k_chunk), q_chunk, k_chunk


# Tokens one prefetch program asks the L2 for: one per thread of a four-warp program.
PREFETCH_TOKENS = 128


def table_prefetch(tokens: int, row_bytes: int, table_bytes: int, q_chunk: int,
                   k_chunk: int, span: int, device: torch.device,
                   plain_positions: bool) -> tuple[int, int]:
    """``(period, ahead)`` of a fused launch of ``tokens`` tokens, each with ``row_bytes``
    of q and k rows and a table row of ``table_bytes``, whose tile programs run in chunks of
    ``span`` tokens (``qk_grid``): the first of every ``period`` tile programs (the chunks
    of ``PREFETCH_TOKENS`` tokens) asks the L2 for the table rows of the tokens ``ahead``
    such blocks on, about ``Settings.table_prefetch_per_sm`` programs per multiprocessor
    later (rounded up). ``(0, 0)``, no prefetch, within the L2, where the table is less
    than ``Settings.table_prefetch_min_share`` of the bytes, for a launch in q-then-k order,
    where ``span`` does not divide ``PREFETCH_TOKENS``, or for MRoPE's positions
    (``plain_positions`` False)."""
    s = SETTINGS
    share = table_bytes / (2 * row_bytes + table_bytes)
    if (not s.table_prefetch_per_sm or share < s.table_prefetch_min_share
            or not past_l2(tokens * row_bytes, device) or not q_chunk
            or not plain_positions or PREFETCH_TOKENS % span):
        return 0, 0
    period = PREFETCH_TOKENS // span * (q_chunk + k_chunk)
    return period, -(-int(s.table_prefetch_per_sm * _sms(device)) // period)


def pdl_variant(plan_q: TilePlan, plan_k: TilePlan, device: torch.device) -> int:
    """The fused kernel's ``PDL`` constant for a PDL launch of these tiles:
    ``Settings.pdl_variant`` where set, else 2 past ``pdl_wait_first_warps_per_sm`` warps
    a multiprocessor, 1 below."""
    s = SETTINGS
    if s.pdl_variant not in (0, 1, 2):
        # Any other constant would compile a PDL launch that never waits.
        raise ValueError(f"Settings.pdl_variant must be 0 (by the rule), 1 or 2, got "
                         f"{s.pdl_variant!r}")
    if s.pdl_variant:
        return s.pdl_variant
    return 2 if warps_per_sm((plan_q, plan_k), device) > s.pdl_wait_first_warps_per_sm else 1


def warps_per_sm(plans: tuple[TilePlan, TilePlan], device: torch.device) -> float:
    """The warps a launch of ``plans`` (one warp count for both) holds a multiprocessor."""
    return (sum(p.programs for p in plans) * max(p.num_warps for p in plans)
            / _sms(device))


def _sms(device: torch.device) -> int:
    """The multiprocessors of ``device`` (one for the CPU)."""
    return _sm_count(device.index or 0) if device.type == "cuda" else 1


@cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@cache
def _l2_bytes(index: int) -> int:
    return torch.cuda.get_device_properties(index).L2_cache_size


def past_l2(nbytes: int, device: torch.device) -> bool:
    """Whether ``nbytes`` exceed the L2 of ``device`` (``Settings.l2_bytes`` where set; a
    CPU has no L2 to pass)."""
    if SETTINGS.l2_bytes:
        return nbytes > SETTINGS.l2_bytes
    return device.type == "cuda" and nbytes > _l2_bytes(device.index or 0)


def min_programs(device: torch.device) -> int:
    """The program count below which a launch on ``device`` spreads its rows thinner.

    On the CPU interpreter every program costs milliseconds, so it spreads nothing.
    """
    if device.type != "cuda":
        return 1
    return max(1, int(SETTINGS.min_programs_per_sm * _sm_count(device.index or 0)))


def few_programs(plans: tuple[TilePlan, TilePlan], device: torch.device, pdl: bool) -> bool:
    """Whether a launch of ``plans`` (not spread: ``plan_pair(spread=False)``) holds at
    least ``min_programs`` and fewer than ``Settings.few_programs_per_sm`` programs a
    multiprocessor of ``device`` (``few_programs_k_ratio_scale`` times as many where its k
    tiles hold ``few_programs_k_ratio`` times a q tile's tokens; never on the CPU, which
    spreads nothing), and is not a PDL launch of variant 1 of at most
    ``Settings.few_programs_pdl_wave_warps_per_sm`` warps."""
    s = SETTINGS
    programs = sum(p.programs for p in plans)
    one_wave = (pdl and pdl_variant(*plans, device) == 1
                and warps_per_sm(plans, device) <= s.few_programs_pdl_wave_warps_per_sm)
    plan_q, plan_k = plans
    wide_k = (s.few_programs_k_ratio
              and plan_k.block_t >= s.few_programs_k_ratio * plan_q.block_t)
    per_sm = s.few_programs_per_sm * (s.few_programs_k_ratio_scale if wide_k else 1)
    return (device.type == "cuda" and not one_wave
            and min_programs(device) <= programs < per_sm * _sms(device))


def plan_pair(tokens: int, heads_q: int, heads_k: int, width: int, element_size: int,
              device: torch.device, elems_per_program: int | None = None,
              k_token_ratio: int = 0, elems_per_warp: int | None = None,
              spread: bool = True) -> tuple[TilePlan, TilePlan]:
    """Plans for the q and the k rows of one launch, sharing the chip by their row counts;
    with ``k_token_ratio``, k tiles of at most that many times a q tile's tokens; without
    ``spread``, tiles of the full program size however few."""
    total = min_programs(device) if spread else 1
    share_q = -(-total * heads_q // (heads_q + heads_k))
    plan_q = plan_tiles(tokens, heads_q, width, element_size, share_q, elems_per_program,
                        elems_per_warp)
    k_elems = elems_per_program
    if k_token_ratio:
        k_elems = min(elems_per_program or SETTINGS.elems_per_program,
                      plan_q.block_t * k_token_ratio * next_pow2(heads_k) * width)
    return plan_q, plan_tiles(tokens, heads_k, width, element_size, max(1, total - share_q),
                              k_elems, elems_per_warp)
