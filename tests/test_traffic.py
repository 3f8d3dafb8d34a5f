"""The byte model behind every share of copy: the bytes each route's launches move."""

import torch

from qkbench.kernels import traffic


def arguments(q_shape, k_shape, positions_shape, rotary: int):
    """The op's tensors (q and k bf16, fp32 weights and table, int64 positions)."""
    d = q_shape[-1]
    return (torch.zeros(q_shape, dtype=torch.bfloat16), torch.zeros(k_shape, dtype=torch.bfloat16),
            torch.ones(d), torch.ones(d), torch.zeros(positions_shape, dtype=torch.int64),
            torch.zeros(64, rotary))


# 3 tokens, q 4 heads and k 2 heads of 8 channels (bf16), rotary 4: rows 192 + 96 bytes,
# their rotary channels 96 + 48, weights 32 each, table rows 3 x 4 x 4 and positions 3 x 8.
PARTIAL = arguments((3, 4, 8), (3, 2, 8), (3,), 4)


def test_the_fused_route_moves_each_row_twice_and_the_table_rows_once():
    assert traffic.fused_bytes(*PARTIAL, rotary_dim=4) == 2 * (192 + 96) + 2 * 32 + 48 + 24


def test_each_split_launch_counts_its_own_rows_weight_and_table():
    assert traffic.split_launch_bytes(*PARTIAL, rotary_dim=4) == {
        "norm_q": 2 * 192 + 32, "norm_k": 2 * 96 + 32, "rope": 2 * (96 + 48) + 48 + 24}


def test_the_split_route_is_the_sum_of_its_launches():
    assert traffic.split_bytes(*PARTIAL, rotary_dim=4) == (416 + 224 + 360)


def test_full_rotary_is_the_default_width():
    full = arguments((3, 4, 8), (3, 2, 8), (3,), 8)
    assert traffic.split_launch_bytes(*full)["rope"] == 2 * (192 + 96) + 3 * 8 * 4 + 24


def test_batched_rows_count_every_token_of_every_sequence():
    batched = arguments((2, 3, 4, 8), (2, 3, 2, 8), (2, 3), 4)
    assert traffic.fused_bytes(*batched, rotary_dim=4) == (
        2 * 2 * (192 + 96) + 2 * 32 + 2 * 48 + 2 * 24)


def test_mrope_positions_count_all_three_axes():
    mrope = arguments((3, 4, 8), (3, 2, 8), (3, 3), 4)
    assert traffic.fused_bytes(*mrope, rotary_dim=4) == 2 * (192 + 96) + 2 * 32 + 48 + 72
