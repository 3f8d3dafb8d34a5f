"""Peer kernels as routes: other projects' implementations of the operation, named
``peer:NAME``, each importing a package the user installed (nothing is vendored here).

An adapter maps the op's contract (``qk_norm_rope``'s signature, see ``routes``) onto
its peer's API. Everything the peer needs that the contract does not hand it (cos/sin
rows gathered per token, MRoPE lanes, a packed view) is done inside the call, so the timed
work is the whole operation; so is delivering the result into the contract's outputs.
What a peer cannot do raises ``NotSupported`` *before* it is imported: the case is
reported "n/s", never as an error. Every adapter is checked against the FP64 oracle like
any route (peers are not bit-exact with the shipped kernels, and are not asked to be).

- ``peer:liger``: Liger-Kernel (PyPI ``liger-kernel``, pure Triton): its RMSNorm on q and
  on k ("gemma" casting: the norm and the weight in fp32, rounded once, as the contract
  says), then its RoPE on both (NeoX halves only).
- ``peer:vllm``: vLLM's fused QK-norm + RoPE CUDA op (``vllm._custom_ops``), in place on a
  packed qkv projection.
- ``peer:sglang``: SGLang's fused QK-norm + RoPE (``sglang.jit_kernel`` or ``sgl_kernel``),
  in place on a packed qkv projection, bf16; it computes cos/sin from the RoPE base (the
  cases' table is built from the same base, so the oracle check holds it to the table).
- ``peer:flashinfer``: FlashInfer's RMSNorm on q and on k, then its cos/sin-cache RoPE.
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from qkbench.case import ROPE_BASE
from qkbench.errors import RouteError
from qkbench.routes import NotSupported, Route, _deliver

INSTALL_HINT = 'pip install "qkbench[peers]"'


# -- what every adapter shares ----------------------------------------------------------------


def rope_rows(cos_sin_cache: torch.Tensor, positions: torch.Tensor, rotary_dim: int,
              mrope_section=None, mrope_layout: str = "sectioned"
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's cos and sin rows ``[T, rotary_dim / 2]`` from the vLLM/SGLang table
    (cos then sin in a row); under MRoPE each rotary lane takes the row of its own axis's
    position (the kernels' axis map)."""
    half = rotary_dim // 2
    if mrope_section is None:
        rows = cos_sin_cache.index_select(0, positions.reshape(-1))  # [T, R]
        return rows[:, :half], rows[:, half:rotary_dim]
    from qkbench.kernels.mrope import axis_map_tensor

    axes = axis_map_tensor(tuple(mrope_section), mrope_layout, positions.device)
    lane_positions = positions.reshape(3, -1).index_select(0, axes).T  # [T, R/2]
    lanes = torch.arange(half, device=positions.device)
    return cos_sin_cache[lane_positions, lanes], cos_sin_cache[lane_positions, lanes + half]


def packed_qkv(q: torch.Tensor, k: torch.Tensor, who: str) -> tuple[torch.Tensor, int]:
    """``(qkv, heads_v)``: q and k as the leading heads of one packed
    ``[T, (Hq + Hk + Hv) * D]`` projection (``packed = true`` geometries), for peers that
    work in place on it; else ``NotSupported``."""
    if q.dim() != 3:
        raise NotSupported(f"{who} takes the serving layout [T, H, D], not a [B, S, H, D] batch")
    T, heads_q, D = q.shape
    heads_k = k.shape[1]
    row = q.stride(0)
    if not (q.stride(1) == D and k.stride(1) == D and k.stride(0) == row and row % D == 0
            and q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
            and k.storage_offset() == q.storage_offset() + heads_q * D
            and row >= (heads_q + heads_k) * D):
        raise NotSupported(f"{who} works in place on a packed qkv projection; this case's q "
                           "and k are separate tensors (a geometry with packed = true is)")
    return torch.as_strided(q, (T, row), (row, 1)), row // D - heads_q - heads_k


def _fused_qkv_requirements(who: str, q: torch.Tensor, inplace: bool, weight_mode: str,
                            mrope_section, dtypes: tuple, head_dims: tuple) -> None:
    """What the serving stacks' fused in-place ops share: no MRoPE, plain weights, in place,
    some dtypes and head sizes."""
    if mrope_section is not None:
        raise NotSupported(f"{who}'s fused op has no MRoPE")
    if weight_mode != "plain":
        raise NotSupported(f"{who}'s fused op has no offset (1 + w) weights")
    if not inplace:
        raise NotSupported(f"{who}'s fused op works in place only")
    if q.dtype not in dtypes:
        raise NotSupported(f"{who}'s fused op takes {', '.join(str(d) for d in dtypes)}, "
                           f"not {q.dtype}")
    if q.shape[-1] not in head_dims:
        raise NotSupported(f"{who}'s fused op takes head_dim {head_dims}, not {q.shape[-1]}")


# -- the adapters -------------------------------------------------------------------------------


def liger_op(q, k, q_weight, k_weight, positions, cos_sin_cache, *, eps: float = 1e-6,
             rotary_dim: int | None = None, style: str = "neox", weight_mode: str = "plain",
             mrope_section=None, mrope_layout: str = "sectioned", inplace: bool = True,
             q_out=None, k_out=None, check_positions=None):
    """Liger-Kernel: ``liger_rms_norm`` on q and on k, then ``liger_rope`` on both."""
    if style != "neox":
        raise NotSupported("Liger's rope rotates NeoX halves only, not style 'gptj'")
    from liger_kernel.transformers import functional as liger

    D = q.shape[-1]
    rotary = rotary_dim or D
    offset = 1.0 if weight_mode == "offset" else 0.0
    # [rows, D] in, [rows, D] out (a new tensor; a strided view is made contiguous first).
    q_norm = liger.liger_rms_norm(q.reshape(-1, D), q_weight, eps, offset, "gemma")
    k_norm = liger.liger_rms_norm(k.reshape(-1, D), k_weight, eps, offset, "gemma")
    cos, sin = rope_rows(cos_sin_cache, positions, rotary, mrope_section, mrope_layout)
    T = cos.shape[0]
    # Liger's rope takes (batch, heads, seq, D) views of (batch, seq, heads, D) rows and
    # cos/sin (1, seq, >= rotary / 2); it rotates in place and returns the same views.
    q_rot, k_rot = liger.liger_rope(q_norm.view(1, T, -1, D).transpose(1, 2),
                                    k_norm.view(1, T, -1, D).transpose(1, 2),
                                    cos[None], sin[None], rotary_dim=rotary)
    return _deliver((q_rot.transpose(1, 2).reshape(q.shape),
                     k_rot.transpose(1, 2).reshape(k.shape)), q, k, inplace, q_out, k_out)


def vllm_op(q, k, q_weight, k_weight, positions, cos_sin_cache, *, eps: float = 1e-6,
            rotary_dim: int | None = None, style: str = "neox", weight_mode: str = "plain",
            mrope_section=None, mrope_layout: str = "sectioned", inplace: bool = True,
            q_out=None, k_out=None, check_positions=None):
    """vLLM's ``fused_qk_norm_rope``: in place on the packed qkv projection."""
    _fused_qkv_requirements("vLLM", q, inplace, weight_mode, mrope_section,
                            (torch.bfloat16, torch.float16), (64, 128, 256))
    qkv, heads_v = packed_qkv(q, k, "vLLM's fused op")
    from vllm import _custom_ops as ops

    ops.fused_qk_norm_rope(qkv, q.shape[1], k.shape[1], heads_v, q.shape[-1], eps, q_weight,
                           k_weight, cos_sin_cache, style == "neox", positions.reshape(-1))
    return q, k


def _sglang_fused() -> Callable:
    try:
        from sglang.jit_kernel.fused_qknorm_rope import fused_qk_norm_rope
    except ImportError:
        from sgl_kernel import fused_qk_norm_rope
    return fused_qk_norm_rope


def sglang_op(q, k, q_weight, k_weight, positions, cos_sin_cache, *, eps: float = 1e-6,
              rotary_dim: int | None = None, style: str = "neox", weight_mode: str = "plain",
              mrope_section=None, mrope_layout: str = "sectioned", inplace: bool = True,
              q_out=None, k_out=None, check_positions=None):
    """SGLang's fused QK-norm + RoPE: in place on the packed qkv projection; cos/sin from
    the RoPE base (no YaRN: factor 1)."""
    _fused_qkv_requirements("SGLang", q, inplace, weight_mode, mrope_section,
                            (torch.bfloat16,), (64, 128, 256))
    qkv, heads_v = packed_qkv(q, k, "SGLang's fused op")
    D = q.shape[-1]
    _sglang_fused()(qkv, q.shape[1], k.shape[1], heads_v, D, eps, q_weight, k_weight,
                    ROPE_BASE, style == "neox", positions.reshape(-1).to(torch.int32),
                    1.0, 0.0, 0.0, 1.0, rotary_dim or D)
    return q, k


def flashinfer_op(q, k, q_weight, k_weight, positions, cos_sin_cache, *, eps: float = 1e-6,
                  rotary_dim: int | None = None, style: str = "neox",
                  weight_mode: str = "plain", mrope_section=None,
                  mrope_layout: str = "sectioned", inplace: bool = True, q_out=None,
                  k_out=None, check_positions=None):
    """FlashInfer: ``rmsnorm`` (``gemma_rmsnorm`` for offset weights) on q and on k, then
    ``apply_rope_with_cos_sin_cache_inplace`` on both."""
    if mrope_section is not None:
        raise NotSupported("FlashInfer's cos/sin-cache rope has no MRoPE")
    if cos_sin_cache.dtype != torch.float32:
        raise NotSupported("FlashInfer's cos/sin-cache rope takes an fp32 table")
    from flashinfer.norm import gemma_rmsnorm, rmsnorm
    from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace

    norm = gemma_rmsnorm if weight_mode == "offset" else rmsnorm
    D = q.shape[-1]
    q_norm = norm(q.reshape(-1, D), q_weight, eps)  # [rows, D], a new tensor
    k_norm = norm(k.reshape(-1, D), k_weight, eps)
    flat = positions.reshape(-1)
    T = flat.shape[0]
    apply_rope_with_cos_sin_cache_inplace(flat, q_norm.view(T, -1), k_norm.view(T, -1), D,
                                          cos_sin_cache, is_neox=style == "neox")
    return _deliver((q_norm.view(q.shape), k_norm.view(k.shape)), q, k, inplace, q_out, k_out)


# -- the registry -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    op: Callable
    module: str  # imported when the route is resolved, so a missing package fails early
    package: str  # what to install

    @property
    def install(self) -> str:
        return INSTALL_HINT if self.package == "liger-kernel" else f"pip install {self.package}"


PEERS = {
    "liger": Peer(liger_op, "liger_kernel.transformers.functional", "liger-kernel"),
    "vllm": Peer(vllm_op, "vllm._custom_ops", "vllm"),
    "sglang": Peer(sglang_op, "sglang", "sglang"),
    "flashinfer": Peer(flashinfer_op, "flashinfer", "flashinfer-python"),
}
PREFIX = "peer:"


def resolve(name: str) -> Route:
    """The route ``peer:NAME``; a ``RouteError`` naming what to install if its package is
    missing."""
    peer = PEERS.get(name.removeprefix(PREFIX))
    if peer is None:
        raise RouteError(f"unknown peer route {name!r}: use one of "
                         f"{', '.join(PREFIX + p for p in PEERS)}")
    try:
        importlib.import_module(peer.module)
    except Exception as e:  # an installed package can also fail to import (a CUDA build)
        raise RouteError(f"route {name!r} needs {peer.package} ({peer.install}); importing "
                         f"{peer.module} failed: {type(e).__name__}: {e}") from None
    return Route(name, peer.op)
