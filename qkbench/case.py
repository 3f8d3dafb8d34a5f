"""What one measured cell is (a geometry at a token count) and its seeded random inputs."""

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from math import prod

import torch

from qkbench.errors import ProtocolError

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
ROPE_BASE = 10000.0


@dataclass(frozen=True)
class Geometry:
    """The attention layer's head layout and the options of the operation."""

    name: str
    heads_q: int
    heads_k: int
    head_dim: int
    rotary_dim: int | None = None
    style: str = "neox"
    weight_mode: str = "plain"
    mrope_section: tuple[int, int, int] | None = None
    mrope_layout: str = "sectioned"
    inplace: bool = True
    # q and k as strided views into one packed [T, (Hq + 2 Hk) * D] qkv projection.
    packed: bool = False
    # DiT layout [B, S, H, D] with this batch; None is the serving layout [T, H, D].
    batch: int | None = None

    @property
    def rotary(self) -> int:
        return self.rotary_dim or self.head_dim

    @property
    def label(self) -> str:
        return f"({self.heads_q},{self.heads_k})x{self.head_dim}/r{self.rotary}"


@dataclass(frozen=True)
class Case:
    """One cell of a sweep: a geometry, a token count and the dtypes."""

    geometry: Geometry
    tokens: int
    dtype: str = "bfloat16"
    table_dtype: str = "float32"  # or "activation"
    positions_dtype: str = "int64"
    max_position: int = 8192
    eps: float = 1e-6

    @property
    def key(self) -> str:
        return f"{self.geometry.name}/T{self.tokens}"

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Case":
        geometry = dict(data["geometry"])
        if geometry.get("mrope_section") is not None:
            geometry["mrope_section"] = tuple(geometry["mrope_section"])
        return cls(**{**data, "geometry": Geometry(**geometry)})


@dataclass
class Inputs:
    """The tensors and options of one call of the operation."""

    q: torch.Tensor
    k: torch.Tensor
    q_weight: torch.Tensor
    k_weight: torch.Tensor
    positions: torch.Tensor
    cos_sin_cache: torch.Tensor
    options: dict = field(default_factory=dict)  # eps, rotary_dim, style, ... (not inplace)

    def arguments(self, **overrides) -> dict:
        """The op's keyword arguments for these inputs; ``overrides`` replaces any input or
        option by name."""
        return {"q": self.q, "k": self.k, "q_weight": self.q_weight, "k_weight": self.k_weight,
                "positions": self.positions, "cos_sin_cache": self.cos_sin_cache,
                **self.options, **overrides}

    def call(self, op: Callable, **overrides) -> tuple[torch.Tensor, torch.Tensor]:
        """Call ``op`` (any route with the op's signature) on these inputs, ``overrides``
        as ``arguments`` takes them."""
        return op(**self.arguments(**overrides))

    def with_qk(self, q: torch.Tensor, k: torch.Tensor) -> "Inputs":
        return replace(self, q=q, k=k)


def rope_table(max_position: int, rotary_dim: int, dtype: torch.dtype,
               device: torch.device | str, base: float = ROPE_BASE) -> torch.Tensor:
    """The vLLM/SGLang cos/sin cache ``[max_position, rotary_dim]``: cos then sin."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), -1).to(dtype=dtype, device=device)


def _qk(g: Geometry, lead: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator,
        device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    D = g.head_dim
    # Rows of different scales, so that a wrong per-row reduction cannot hide.
    def rows(heads: int) -> torch.Tensor:
        x = torch.randn(*lead, heads, D, generator=gen, dtype=torch.float32)
        return x * torch.exp(torch.randn(*lead, heads, 1, generator=gen))

    if not g.packed:
        return rows(g.heads_q).to(dtype).to(device), rows(g.heads_k).to(dtype).to(device)
    heads = g.heads_q + 2 * g.heads_k
    qkv = torch.randn(*lead, heads * D, generator=gen).to(dtype).to(device)
    view = qkv.view(*lead, heads, D)
    return view[..., : g.heads_q, :], view[..., g.heads_q : g.heads_q + g.heads_k, :]


def make_inputs(case: Case, seed: int, device: torch.device | str) -> Inputs:
    """Seeded random inputs for ``case`` (never zeros), built on the CPU then moved."""
    g = case.geometry
    if case.dtype not in DTYPES:
        raise ProtocolError(f"dtype must be one of {sorted(DTYPES)}, got {case.dtype!r}")
    dtype = DTYPES[case.dtype]
    gen = torch.Generator().manual_seed(seed)
    lead = (g.batch, case.tokens // g.batch) if g.batch else (case.tokens,)
    if g.batch and case.tokens % g.batch:
        raise ProtocolError(f"{case.key}: tokens ({case.tokens}) must be a multiple of the "
                            f"batch ({g.batch})")
    q, k = _qk(g, lead, dtype, gen, device)
    D = g.head_dim
    centre = 0.0 if g.weight_mode == "offset" else 1.0
    q_weight = (centre + 0.2 * torch.randn(D, generator=gen)).to(dtype).to(device)
    k_weight = (centre + 0.2 * torch.randn(D, generator=gen)).to(dtype).to(device)
    axes = 3 if g.mrope_section else 1
    positions = torch.randint(0, case.max_position, (axes, prod(lead)), generator=gen)
    positions = positions.to(getattr(torch, case.positions_dtype)).to(device)
    positions = positions.view(3, *lead) if g.mrope_section else positions.view(lead)
    table_dtype = dtype if case.table_dtype == "activation" else DTYPES[case.table_dtype]
    table = rope_table(case.max_position, g.rotary, table_dtype, device)
    options = {"eps": case.eps, "rotary_dim": g.rotary, "style": g.style,
               "weight_mode": g.weight_mode, "mrope_section": g.mrope_section,
               "mrope_layout": g.mrope_layout}
    return Inputs(q, k, q_weight, k_weight, positions, table, options)


def fresh_copy(x: torch.Tensor) -> torch.Tensor:
    """A copy with the same shape *and strides*, so a strided view stays strided."""
    out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return out.copy_(x)
