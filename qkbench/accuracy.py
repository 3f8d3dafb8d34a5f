"""Exactness and accuracy: bit-pattern comparison, and error against the FP64 oracle."""

import torch

INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}

# Per activation dtype: the largest |out - oracle| as a share of its row's largest
# |oracle|, and the largest norm-wise relative error. bf16 allows for Triton's interpreter,
# whose fp32 -> bf16 cast truncates (one ulp, not half).
TOLERANCE = {
    torch.bfloat16: (2.0**-6, 1e-2),
    torch.float16: (2.0**-9, 2e-3),
    torch.float32: (1e-5, 1e-5),
}


def bits(x: torch.Tensor) -> torch.Tensor:
    """The bit patterns of ``x`` as integers (so -0.0 differs from 0.0 and NaN from NaN)."""
    return x.contiguous().view(INT_VIEW[x.dtype])


def differing_share(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of elements whose bit patterns differ."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return 1.0
    if a.numel() == 0:
        return 0.0
    return (bits(a) != bits(b)).float().mean().item()


def oracle_error(out: torch.Tensor, oracle: torch.Tensor) -> dict:
    """The worst element error (as a share of its row's scale) and the norm-wise error."""
    if out.numel() == 0:
        return {"worst": 0.0, "relative": 0.0, "nan": False}
    err = (out.double() - oracle).abs()
    scale = oracle.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    return {"worst": (err / scale).max().item(),
            "relative": (err.norm() / oracle.norm().clamp_min(1e-30)).item(),
            "nan": bool(out.isnan().any())}


def within_tolerance(error: dict, dtype: torch.dtype) -> bool:
    worst, relative = TOLERANCE[dtype]
    return not error["nan"] and error["worst"] <= worst and error["relative"] <= relative
