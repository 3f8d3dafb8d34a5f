"""The per-call cost of ``overlap.Footprint.check``: an in-place call of (32,8) x 128, T = 1,
q and k packed in one qkv buffer and apart; the best of five repeats of 200,000 calls."""

import timeit

import torch

from qkbench.kernels.calls import SLOTS, written
from qkbench.kernels.overlap import Footprint

T, HQ, HK, D = 1, 32, 8, 128
CALLS = 200_000

packed = torch.empty(T, HQ + 2 * HK, D, dtype=torch.bfloat16)
layouts = {
    "packed": (packed[:, :HQ], packed[:, HQ:HQ + HK]),
    "separate": (torch.empty(T, HQ, D, dtype=torch.bfloat16),
                 torch.empty(T, HK, D, dtype=torch.bfloat16)),
}
weights = torch.empty(D), torch.empty(D)
table, positions = torch.empty(4096, 128), torch.zeros(T, dtype=torch.int64)
for name, (q, k) in layouts.items():
    tensors = (q, k, None, None, *weights, table, positions)
    footprint = Footprint(tensors, written(True, tensors))
    best = min(timeit.repeat(lambda f=footprint, t=tensors: f.check(SLOTS, t), number=CALLS,
                             repeat=5))
    print(name, best / CALLS * 1e6, "us")
