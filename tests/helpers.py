"""Comparisons the kernel tests share."""

import torch
from qkbench.kernels import reference

INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}

# Largest |out - oracle| as a share of its row's largest |oracle|, and the largest
# norm-wise relative error, per activation dtype. bf16 allows for the interpreter's
# truncating fp32 -> bf16 cast (one ulp, not half).
TOLERANCE = {
    torch.bfloat16: (2.0**-6, 1e-2),
    torch.float16: (2.0**-9, 2e-3),
    torch.float32: (1e-5, 1e-5),
}


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(INT_VIEW[x.dtype])


def differing_share(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of elements whose bit patterns differ."""
    return (bits(a) != bits(b)).float().mean().item()


def assert_bit_identical(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    share = differing_share(a, b)
    assert share == 0.0, f"{what}: {share:.3%} of elements differ in their bits"


def assert_matches_oracle(out: torch.Tensor, oracle: torch.Tensor, what: str = "") -> None:
    assert not out.isnan().any(), f"{what}: NaN in the output"
    err = (out.double() - oracle).abs()
    row_scale = oracle.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    elem_tol, norm_tol = TOLERANCE[out.dtype]
    worst = (err / row_scale).max().item()
    rel = (err.norm() / oracle.norm()).item()
    assert worst <= elem_tol, f"{what}: worst element error {worst:.3g} of its row's scale"
    assert rel <= norm_tol, f"{what}: norm-wise relative error {rel:.3g}"


def oracle_of(inputs) -> tuple[torch.Tensor, torch.Tensor]:
    return inputs.call(reference.qk_norm_rope_oracle)
