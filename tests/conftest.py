"""Test setup: without a GPU the Triton kernels run on the CPU interpreter."""

import os

import pytest
import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # Must be set before the kernels are imported (Triton reads it when it decorates them).
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = "cuda" if ON_GPU else "cpu"

gpu_only = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA device")


@pytest.fixture
def device() -> str:
    return DEVICE
