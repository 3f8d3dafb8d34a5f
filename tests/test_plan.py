"""The launch plan's deterministic rule, at the tiles measured on the H200 (132 SMs)."""

import pytest
import torch

from qkbench.kernels import plan
from qkbench.kernels.fused import fused_plans, fused_tiles
from qkbench.kernels.rope import rope_plans

H200 = torch.device("cuda", 0)


@pytest.fixture(autouse=True)
def h200_sm_count_and_l2(monkeypatch):
    monkeypatch.setattr(plan, "_sm_count", lambda index: 132)
    monkeypatch.setattr(plan, "_l2_bytes", lambda index: 60 << 20)


def tiles(plans) -> tuple:
    return tuple((p.block_t, p.block_h, p.num_warps) for p in plans)


def test_full_rotary_at_large_t_takes_four_warp_programs_of_32_rows():
    # 40 MiB of q and k rows: within the L2, whose k tiles keep the q tiles' size.
    assert tiles(fused_plans(4096, 32, 8, 128, 128, H200)) == ((1, 32, 4), (4, 8, 4))


@pytest.mark.parametrize("tokens", [256, 2048, 8192, 32768])
def test_partial_rotary_from_t_256_takes_one_warp_programs_of_4_rows(tokens):
    assert tiles(fused_plans(tokens, 16, 2, 256, 64, H200)) == ((1, 4, 1), (2, 2, 1))


def test_partial_rotary_programs_follow_their_own_setting():
    # 36 MiB of q and k rows: within the L2, whose k tiles keep the q tiles' size.
    with plan.use(partial_elems_per_program=4096):
        assert tiles(fused_plans(4096, 16, 2, 256, 64, H200)) == ((1, 8, 2), (4, 2, 2))
    with plan.use(elems_per_program=2048):  # the setting of full rotary does not reach it
        assert tiles(fused_plans(4096, 16, 2, 256, 64, H200)) == ((1, 4, 1), (2, 2, 1))


def test_heads_a_power_of_two_block_would_pad_by_over_an_eighth_take_a_smaller_block():
    # DiT's 24 heads: a block of 32 would pad them by a third; 8 divides them.
    assert tiles(fused_plans(3973, 24, 24, 128, 128, H200)) == ((4, 8, 4), (4, 8, 4))


def test_the_padding_setting_moves_the_head_block():
    with plan.use(max_head_padding=4 / 3):
        assert tiles(fused_plans(3973, 24, 24, 128, 128, H200)) == ((1, 32, 4), (1, 32, 4))


def test_the_split_routes_rope_takes_two_warp_programs_of_1024_elements_at_large_t():
    assert tiles(rope_plans(8192, 32, 8, 128, 128, True, H200)) == ((1, 8, 2), (1, 8, 2))
    # In place with rotary 64 of 256 it holds the rotary channels only: 16 rows a program.
    assert tiles(rope_plans(8192, 16, 2, 256, 64, True, H200)) == ((1, 16, 2), (8, 2, 2))


def test_rope_programs_follow_their_own_setting_and_leave_the_fused_kernels():
    fused = tiles(fused_plans(8192, 32, 8, 128, 128, H200))
    with plan.use(rope_elems_per_program=4096, rope_elems_per_warp=1024):
        assert tiles(rope_plans(8192, 32, 8, 128, 128, True, H200)) == ((1, 32, 4), (4, 8, 4))
        assert tiles(fused_plans(8192, 32, 8, 128, 128, H200)) == fused


def test_partial_rotary_with_pdl_keeps_the_two_warp_programs_within_a_wave():
    # 512 tokens of (24,4): 1792 two-warp programs, 27 warps a multiprocessor.
    pdl = fused_plans(512, 24, 4, 256, 64, H200, pdl=True)
    assert tiles(pdl) == ((1, 8, 2), (2, 4, 2)) and plan.pdl_variant(*pdl, H200) == 1
    assert tiles(fused_plans(1024, 32, 8, 128, 128, H200, pdl=True)) == tiles(
        fused_plans(1024, 32, 8, 128, 128, H200))


@pytest.mark.parametrize("tokens, heads_q, heads_k, head_dim, rotary_dim", [
    (8192, 32, 8, 128, 128), (2048, 32, 8, 128, 128), (1024, 24, 4, 256, 64),
    (3973, 24, 24, 128, 128)])
def test_a_pdl_launch_of_many_waves_waits_first(tokens, heads_q, heads_k, head_dim,
                                                rotary_dim):
    _, variant = fused_tiles(tokens, heads_q, heads_k, head_dim, rotary_dim, H200, pdl=True)
    assert variant == 2


def test_partial_rotary_waiting_first_takes_its_own_one_warp_tiles():
    # 1024 tokens of (24,4) x 256 / rotary 64: 7168 one-warp programs, 54 warps an SM.
    plans, variant = fused_tiles(1024, 24, 4, 256, 64, H200, pdl=True)
    assert variant == 2 and tiles(plans) == ((1, 4, 1), (1, 4, 1))
    assert plans == fused_plans(1024, 24, 4, 256, 64, H200)


def test_the_pdl_variant_is_decided_on_the_tiles_without_pdl():
    # (32,8) x 128 / rotary 64 at T = 1024: one-warp tiles, 38.8 warps an SM, so variant 1
    # and its four-warp tiles, which counted again would hold 77.6 and say 2.
    (plan_q, plan_k), variant = fused_tiles(1024, 32, 8, 128, 64, H200, pdl=True)
    assert variant == 1 and (plan_q.num_warps, plan_k.num_warps) == (4, 4)
    assert plan.pdl_variant(plan_q, plan_k, H200) == 2


@pytest.mark.parametrize("variant", [3, -1])
def test_a_pdl_variant_that_would_never_wait_is_refused(variant):
    q, k = fused_plans(1, 32, 8, 128, 128, H200)
    with plan.use(pdl_variant=variant), pytest.raises(ValueError, match="pdl_variant must be"):
        plan.pdl_variant(q, k, H200)


def test_the_pdl_rule_counts_warps_against_its_threshold():
    # 1024 tokens of (32,8): 1280 four-warp programs of 4096 elements, 38.8 warps an SM.
    with plan.use(few_programs_per_sm=0):
        few = fused_plans(1024, 32, 8, 128, 128, H200, pdl=True)
    assert plan.pdl_variant(*few, H200) == 1
    with plan.use(pdl_wait_first_warps_per_sm=38):
        assert plan.pdl_variant(*few, H200) == 2
    with plan.use(pdl_variant=2):
        assert plan.pdl_variant(*fused_plans(1, 32, 8, 128, 128, H200, pdl=True), H200) == 2


@pytest.mark.parametrize("tokens, heads_q, heads_k, expected", [
    # 640 and 1280 programs of 4096 elements: 4.8 and 9.7 a multiprocessor.
    (512, 32, 8, ((1, 16, 4), (2, 8, 4))), (1024, 32, 8, ((1, 16, 4), (2, 8, 4))),
    # 576 and 1536: 4.4 and 11.6.
    (1024, 16, 2, ((1, 16, 4), (8, 2, 4))), (2048, 16, 8, ((1, 16, 4), (2, 8, 4)))])
def test_a_launch_of_few_programs_takes_2048_element_programs_in_four_warps(
        tokens, heads_q, heads_k, expected):
    assert tiles(fused_plans(tokens, heads_q, heads_k, 128, 128, H200)) == expected


@pytest.mark.parametrize("tokens, heads_q, heads_k, head_dim, rotary_dim", [
    (2048, 32, 8, 128, 128),  # 2560 programs, 19.4 a multiprocessor
    (1024, 64, 8, 128, 128),  # 2304, 17.5
    (4096, 16, 8, 128, 128),  # 3072, 23.3
    (4096, 32, 8, 128, 128),  # 5120, 38.8
    (3973, 24, 24, 128, 128),  # DiT: 5964, 45
    (8192, 16, 2, 128, 128),  # 4608, 34.9
    (256, 32, 8, 128, 128),  # 320 programs of 4096 elements: spread, a decode width
    (1024, 16, 2, 256, 64)])  # partial rotary keeps its own programs
def test_other_launches_keep_their_programs(tokens, heads_q, heads_k, head_dim, rotary_dim):
    with plan.use(few_programs_per_sm=0):
        before = fused_tiles(tokens, heads_q, heads_k, head_dim, rotary_dim, H200, pdl=True)
    assert fused_tiles(tokens, heads_q, heads_k, head_dim, rotary_dim, H200,
                       pdl=True) == before


def test_the_few_programs_threshold_counts_the_full_size_programs():
    # 2048 tokens of (32,8): 2560 programs of 4096 elements, 19.4 a multiprocessor.
    default = ((1, 32, 4), (4, 8, 4))
    with plan.use(few_programs_per_sm=2560 / 132):
        assert tiles(fused_plans(2048, 32, 8, 128, 128, H200)) == default
    with plan.use(few_programs_per_sm=2561 / 132):
        assert tiles(fused_plans(2048, 32, 8, 128, 128, H200)) != default


@pytest.mark.parametrize("tokens, heads_q, heads_k, expected", [
    # 2304 programs of 4096 elements, 17.5 a multiprocessor, whose k tiles hold 8 times a
    # q tile's tokens: (2,16)/(16,2), (1,32)/(8,4), (4,8)/(32,1).
    (4096, 16, 2, ((1, 16, 4), (8, 2, 4))), (2048, 32, 4, ((1, 16, 4), (4, 4, 4))),
    (8192, 8, 1, ((2, 8, 4), (16, 1, 4)))])
def test_a_launch_whose_k_tiles_hold_8_times_a_q_tiles_tokens_takes_the_smaller_programs_below_24(
        tokens, heads_q, heads_k, expected):
    assert tiles(fused_plans(tokens, heads_q, heads_k, 128, 128, H200)) == expected


def test_the_k_ratio_threshold_counts_the_full_size_programs():
    # 4096 tokens of (16,2): 2304 programs of 4096 elements, 17.5 a multiprocessor, 1:8.
    default = ((2, 16, 4), (16, 2, 4))
    with plan.use(few_programs_k_ratio_scale=2304 / 132 / 16):
        assert tiles(fused_plans(4096, 16, 2, 128, 128, H200)) == default
    with plan.use(few_programs_k_ratio_scale=2305 / 132 / 16):
        assert tiles(fused_plans(4096, 16, 2, 128, 128, H200)) != default
    with plan.use(few_programs_k_ratio=16):
        assert tiles(fused_plans(4096, 16, 2, 128, 128, H200)) == default


def test_the_few_programs_setting_at_zero_turns_the_k_ratio_cut_off_too():
    with plan.use(few_programs_per_sm=0):
        assert tiles(fused_plans(4096, 16, 2, 128, 128, H200)) == ((2, 16, 4), (16, 2, 4))


@pytest.mark.parametrize("tokens, heads_q, heads_k", [
    (512, 32, 8), (256, 64, 8), (1024, 16, 2), (2048, 8, 1)])  # 17.5-19.4 warps an SM
def test_a_pdl_launch_of_one_wave_keeps_its_full_size_programs(tokens, heads_q, heads_k):
    full = fused_plans(tokens, heads_q, heads_k, 128, 128, H200, pdl=True)
    assert full[0].block_t * full[0].block_h * 128 == plan.SETTINGS.elems_per_program
    assert full != fused_plans(tokens, heads_q, heads_k, 128, 128, H200)


def test_the_one_wave_threshold_counts_the_full_size_warps():
    # 512 tokens of (32,8): 640 four-warp programs of 4096 elements, 19.39 warps an SM.
    with plan.use(few_programs_pdl_wave_warps_per_sm=640 * 4 / 132):
        assert tiles(fused_plans(512, 32, 8, 128, 128, H200, pdl=True))[0] == (1, 32, 4)
    with plan.use(few_programs_pdl_wave_warps_per_sm=639 * 4 / 132):
        assert tiles(fused_plans(512, 32, 8, 128, 128, H200, pdl=True))[0] == (1, 16, 4)


def test_a_pdl_launch_waiting_first_takes_the_smaller_programs_within_one_wave():
    with plan.use(pdl_variant=2):
        assert tiles(fused_plans(512, 32, 8, 128, 128, H200, pdl=True))[0] == (1, 16, 4)


def test_a_pdl_launch_past_one_wave_takes_the_smaller_programs():
    # 1024 tokens of (16,8): 768 four-warp programs of 4096 elements, 23.3 warps an SM.
    plans, variant = fused_tiles(1024, 16, 8, 128, 128, H200, pdl=True)
    assert tiles(plans) == ((1, 16, 4), (2, 8, 4)) and variant == 1
    with plan.use(few_programs_pdl_wave_warps_per_sm=23.3):
        assert tiles(fused_plans(1024, 16, 8, 128, 128, H200, pdl=True))[0] == (2, 16, 4)


def test_the_cpu_never_takes_the_smaller_programs():
    # 10 programs of 4096 elements: fewer than 24 on the CPU's one "multiprocessor".
    cpu = torch.device("cpu")
    assert tiles(fused_plans(8, 32, 8, 128, 128, cpu)) == ((1, 32, 4), (4, 8, 4))


def test_decode_widths_spread_the_rows_over_the_whole_chip():
    q, k = fused_plans(1, 32, 8, 128, 128, H200)
    assert (q.block_t, q.block_h, k.block_t, k.block_h) == (1, 2, 1, 2)
    assert q.programs + k.programs == 20


def test_q_and_k_tiles_of_equal_or_double_tokens_run_in_chunks_of_tokens():
    q, k = fused_plans(32768, 16, 2, 256, 64, H200)
    assert (q.block_t, k.block_t) == (1, 2)
    # Chunks of 2 tokens: their 8 q tiles (4 head blocks each), then their one k tile.
    assert plan.qk_grid(32768, q, k) == (16384 * 9, 8, 1)


def test_q_and_k_tiles_four_times_apart_run_every_q_tile_then_every_k_tile():
    q, k = fused_plans(8192, 16, 2, 128, 128, H200)  # 36 MiB of rows: within the L2
    assert (q.block_t, k.block_t) == (2, 16)
    assert plan.qk_grid(8192, q, k) == (q.programs + k.programs, 0, 0)


@pytest.mark.parametrize("tokens, heads_q, heads_k, expected", [
    (8192, 32, 8, ((1, 32, 4), (2, 8, 2))),  # 80 MiB of q and k rows
    (32768, 32, 8, ((1, 32, 4), (2, 8, 2))),
    (16384, 16, 2, ((2, 16, 4), (4, 2, 1))),  # 72 MiB
    (32768, 16, 2, ((2, 16, 4), (4, 2, 1))),
])
def test_past_the_l2_k_tiles_hold_twice_a_q_tiles_tokens_and_run_in_chunks(
        tokens, heads_q, heads_k, expected):
    q, k = fused_plans(tokens, heads_q, heads_k, 128, 128, H200)
    assert tiles((q, k)) == expected
    # Each chunk: the q tiles of a k tile's tokens (two), then that k tile.
    assert plan.qk_grid(tokens, q, k)[1:] == (2, 1)


@pytest.mark.parametrize("tokens, heads_q, heads_k, k_tile", [
    (4096, 32, 8, (4, 8)),  # 40 MiB of q and k rows
    (8192, 16, 2, (16, 2)),  # 36 MiB
])
def test_within_the_l2_k_tiles_keep_the_q_tiles_program_size(tokens, heads_q, heads_k,
                                                             k_tile):
    _, k = fused_plans(tokens, heads_q, heads_k, 128, 128, H200)
    assert (k.block_t, k.block_h) == k_tile


def test_the_cpu_has_no_l2_to_pass():
    _, k = fused_plans(32768, 16, 2, 128, 128, torch.device("cpu"))
    assert k.block_t == 16


def test_the_l2_size_setting_moves_the_threshold():
    with plan.use(l2_bytes=1):
        _, k = fused_plans(21, 8, 2, 128, 128, torch.device("cpu"))
    assert (k.block_t, k.block_h) == (8, 2)
    with plan.use(l2_bytes=100 << 20):
        _, k = fused_plans(32768, 16, 2, 128, 128, H200)  # 144 MiB
    assert k.block_t == 4
    with plan.use(l2_bytes=200 << 20):
        _, k = fused_plans(32768, 16, 2, 128, 128, H200)
    assert k.block_t == 16


def test_a_k_token_ratio_of_zero_keeps_the_k_tiles_past_the_l2():
    with plan.use(k_token_ratio_past_l2=0):
        _, k = fused_plans(32768, 32, 8, 128, 128, H200)
    assert (k.block_t, k.block_h) == (4, 8)


def test_a_last_chunk_past_t_is_launched_whole():
    q, k = fused_plans(21, 8, 2, 128, 128, torch.device("cpu"))
    assert (q.block_t, k.block_t) == (4, 16)
    with plan.use(interleave_qk_span_ratio=4):
        # Tokens 16-31 in the second chunk: q tiles for tokens 24-31 are wholly masked.
        assert plan.qk_grid(21, q, k) == (10, 4, 1)
    assert q.programs + k.programs == 8


def test_a_span_ratio_of_zero_never_runs_chunks():
    with plan.use(interleave_qk_span_ratio=0):
        q, k = fused_plans(1, 32, 8, 128, 128, H200)
        assert plan.qk_grid(1, q, k) == (q.programs + k.programs, 0, 0)


def table_prefetch(tokens: int, heads_q: int, heads_k: int, head_dim: int, rotary: int,
                   plain_positions: bool = True) -> tuple[int, int]:
    """The fused launch's table prefetch for bf16 rows and an fp32 table on the H200."""
    q, k = fused_plans(tokens, heads_q, heads_k, head_dim, rotary, H200)
    _, q_chunk, k_chunk = plan.qk_grid(tokens, q, k)
    return plan.table_prefetch(tokens, (heads_q + heads_k) * head_dim * 2, rotary * 4,
                               q_chunk, k_chunk, max(q.block_t, k.block_t), H200,
                               plain_positions)


@pytest.mark.parametrize("tokens", [16384, 32768])
def test_past_the_l2_a_table_of_over_4_percent_of_the_bytes_is_prefetched_16_per_sm_ahead(
        tokens):
    # (16,2) x 128: 512 table bytes of 9,728 a token. Chunks of 4 tokens, 3 programs each:
    # every 96th program prefetches, 22 blocks of 128 tokens (16 x 132 programs) ahead.
    assert table_prefetch(tokens, 16, 2, 128, 128) == (96, 22)


def test_a_table_of_a_tenth_of_the_bytes_is_prefetched_too():
    # (8,1) x 128: 512 of 5,120 bytes a token; chunks of 8 tokens, 2 q and 1 k program.
    assert table_prefetch(32768, 8, 1, 128, 128) == (48, 44)


def test_a_table_just_under_4_percent_of_the_bytes_is_not_prefetched():
    assert table_prefetch(32768, 24, 2, 128, 128) == (0, 0)  # 512 of 13,824 bytes: 3.7 %
    with plan.use(table_prefetch_min_share=0.037):
        assert table_prefetch(32768, 24, 2, 128, 128) != (0, 0)


def test_a_launch_in_q_then_k_order_is_never_prefetched():
    with plan.use(interleave_qk_span_ratio=0):
        assert table_prefetch(32768, 16, 2, 128, 128) == (0, 0)


def test_chunks_that_do_not_divide_128_tokens_are_never_prefetched():
    assert plan.table_prefetch(32768, 18 * 128 * 2, 512, 2, 1, 3, H200, True) == (0, 0)
    assert plan.table_prefetch(32768, 18 * 128 * 2, 512, 2, 1, 4, H200, True) == (96, 22)


@pytest.mark.parametrize("heads_q, heads_k, head_dim, rotary", [
    (32, 8, 128, 128),  # the table 2.4 % of the bytes
    (24, 24, 128, 128),  # DiT's heads: 2.0 %
    (16, 2, 256, 64),  # 1.4 %
])
def test_a_table_of_a_small_share_of_the_bytes_is_never_prefetched(heads_q, heads_k,
                                                                    head_dim, rotary):
    assert table_prefetch(32768, heads_q, heads_k, head_dim, rotary) == (0, 0)


def test_within_the_l2_the_table_is_never_prefetched():
    with plan.use(l2_bytes=200 << 20):  # (16,2) x 128 at T = 32768: 144 MiB of rows
        assert table_prefetch(32768, 16, 2, 128, 128) == (0, 0)


def test_mrope_positions_are_never_prefetched():
    assert table_prefetch(32768, 16, 2, 128, 128, plain_positions=False) == (0, 0)


def test_a_prefetch_distance_of_zero_turns_the_prefetch_off():
    with plan.use(table_prefetch_per_sm=0):
        assert table_prefetch(32768, 16, 2, 128, 128) == (0, 0)
