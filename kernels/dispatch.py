"""The dispatch: the fused route or the split route per call, from a measured table.

A table is what ``qkbench crossover RUN --emit dispatch.json`` writes from a run that
compared ``split`` (baseline) with ``fused`` (candidate): per geometry (its shape: heads,
head_dim, rotary_dim, dtype and the op's options) the largest token count through which
the fused route was resolvably faster (``fused_through``), where it stopped being so
(``stops_at``) and whether the run ever saw it stop (``censored``: no crossover measured).

The rule, per call, for a table:

- a geometry the table lists takes the fused route when ``T <= fused_through``, or at any
  ``T`` when the bound is censored (no crossover was measured: as without a table); else
  the split route (past the bound, in the unmeasured gap before ``stops_at``, and
  everywhere when the smallest width measured was already not faster);
- a call whose shape the table does not list takes the split route;
- where several listed geometries match a call (they differ only in layout: in place or
  not, packed, batch, which calls are not matched on), the fused route only if every one
  of them says so.

Without a table every call takes the fused route (no cell of the committed H200 archives
has the fused route slower). The two routes are bit-identical, so the choice changes time,
never results.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .checks import check_tensor
from .fused import check_pdl, qk_norm_rope
from .split import qk_norm_rope_split

KIND = "qkbench.dispatch"
VERSION = 1
# The (baseline, candidate) routes a table chooses between.
ROUTES = ("split", "fused")
# The entries' shape keys a call is matched on: what the op's arguments determine, its
# layout aside (in place or not, packed, batch).
MATCH_KEYS = ("heads_q", "heads_k", "head_dim", "rotary_dim", "dtype", "style",
              "weight_mode", "mrope_section", "mrope_layout")
# The layout keys a table's shapes also record, which calls are not matched on.
LAYOUT_KEYS = ("inplace", "packed", "batch")
# What each matched shape key holds (the kinds ``call_shape`` gives), and in words.
SHAPE_VALUES = {
    **dict.fromkeys(("heads_q", "heads_k", "head_dim", "rotary_dim"),
                    (int, "a whole number >= 1")),
    **dict.fromkeys(("dtype", "style", "weight_mode", "mrope_layout"), (str, "a string")),
    "mrope_section": ((list, type(None)), "a list of whole numbers >= 0 or null"),
}


@dataclass(frozen=True)
class Entry:
    """One geometry of a table: its shape and where the fused route stops winning."""

    geometry: str
    shape: dict
    fused_through: int | None
    censored: bool

    def matches(self, key: dict) -> bool:
        return all(self.shape[k] == key[k] for k in MATCH_KEYS if k in self.shape)

    def fused_at(self, tokens: int) -> bool:
        if self.fused_through is None:
            return False
        return self.censored or tokens <= self.fused_through


def _listed(value: object) -> object:
    """A sequence (a numpy array too) as a list, so that it compares with a table's; any
    other value as given."""
    if value is None or isinstance(value, str):
        return value
    try:
        return list(value)
    except TypeError:
        return value


def call_shape(q: torch.Tensor, k: torch.Tensor, *, rotary_dim: int | None = None,
               style: str = "neox", weight_mode: str = "plain",
               mrope_section: Sequence[int] | None = None, mrope_layout: str = "sectioned"
               ) -> tuple[dict, int]:
    """A call's shape key (``MATCH_KEYS``) and its token count (every leading dim). An
    option of a kind no table lists stays as given: it matches no entry, and the route
    called validates it."""
    check_tensor("q", q)
    check_tensor("k", k)
    if q.dim() < 2 or k.dim() < 2:
        raise ValueError(f"q and k must be [..., H, D], got {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    heads_q, head_dim = q.shape[-2], q.shape[-1]
    key = {"heads_q": heads_q, "heads_k": k.shape[-2], "head_dim": head_dim,
           "rotary_dim": rotary_dim or head_dim, "dtype": str(q.dtype).removeprefix("torch."),
           "style": style, "weight_mode": weight_mode,
           "mrope_section": _listed(mrope_section),
           "mrope_layout": mrope_layout}
    tokens = q.numel() // (heads_q * head_dim) if heads_q * head_dim else 0
    return key, tokens


def _entry(e: dict) -> Entry:
    """One geometry of a table as read, refused where a call would be misrouted by it: a
    shape that lacks a key calls are matched on (it would match any value there) or holds
    one that is neither matched on nor a layout key (a misspelt one), a value of the wrong
    kind (it would match no call), a bound that is not a whole number of tokens >= 1, a
    censored flag that is not true or false, or one that is true beside a measured stop."""
    name = e["geometry"]
    shape = dict(e["shape"])
    unknown = [k for k in shape if k not in MATCH_KEYS + LAYOUT_KEYS]
    if unknown:
        raise ValueError(f"geometry {name!r}: unknown shape keys {', '.join(unknown)} "
                         f"(a shape has {', '.join(MATCH_KEYS + LAYOUT_KEYS)})")
    missing = [k for k in MATCH_KEYS if k not in shape]
    if missing:
        raise ValueError(f"geometry {name!r}: its shape lacks {', '.join(missing)}, which "
                         "calls are matched on")
    for k, (kinds, what) in SHAPE_VALUES.items():
        v = shape[k]
        if isinstance(v, bool) or not isinstance(v, kinds) or (
                isinstance(v, int) and v < 1) or (
                # An MRoPE axis may hold no lane (a section of 0), as the kernels take it.
                isinstance(v, list) and not all(type(x) is int and x >= 0 for x in v)):
            raise TypeError(f"geometry {name!r}: shape {k} must be {what}, got {v!r}")
    bound = e["fused_through"]
    if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)
                              or bound < 1):
        raise TypeError(f"geometry {name!r}: fused_through must be a whole number of "
                        f"tokens >= 1 or null, got {bound!r}")
    if not isinstance(e["censored"], bool):
        raise TypeError(f"geometry {name!r}: censored must be true or false, got "
                        f"{e['censored']!r}")
    if e["censored"] and e.get("stops_at") is not None:
        raise ValueError(f"geometry {name!r}: censored (no stop measured) beside stops_at "
                         f"{e['stops_at']!r}")
    return Entry(name, shape, bound, e["censored"])


class DispatchTable:
    """A loaded dispatch table: ``route(q, k, **options)`` says "fused" or "split"."""

    def __init__(self, data: dict):
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise ValueError(f"not a dispatch table: kind must be {KIND!r}, got "
                             f"{data.get('kind') if isinstance(data, dict) else data!r}")
        if data.get("version") != VERSION:
            raise ValueError(f"dispatch table version {data.get('version')!r} is not "
                             f"supported (this reads {VERSION})")
        routes = (data.get("baseline"), data.get("candidate"))
        if routes != ROUTES:
            raise ValueError(f"a dispatch table must compare split (baseline) with fused "
                             f"(candidate), this one compares {routes[0]} with {routes[1]}")
        try:
            self.entries = [_entry(e) for e in data["geometries"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a dispatch table: its geometries are malformed "
                             f"({type(e).__name__}: {e})") from None

    @classmethod
    def load(cls, path: str | Path) -> "DispatchTable":
        """The table in the JSON file at ``path``; a ValueError naming the file where it is
        not JSON or not a dispatch table (an OSError where it cannot be opened)."""
        with open(path, "rb") as f:
            data = f.read()
        try:
            return cls(json.loads(data))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a dispatch table (not JSON: {e})") from None
        except RecursionError:
            raise ValueError(f"{path}: not a dispatch table (not JSON: nested too "
                             "deeply)") from None
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def route(self, q: torch.Tensor, k: torch.Tensor, **options) -> str:
        """``"fused"`` or ``"split"`` for a call with these tensors and options (the op's
        keyword arguments: rotary_dim, style, weight_mode, mrope_section, mrope_layout;
        others are ignored)."""
        wanted = {name: options[name] for name in
                  ("rotary_dim", "style", "weight_mode", "mrope_section", "mrope_layout")
                  if name in options}
        key, tokens = call_shape(q, k, **wanted)
        matching = [e for e in self.entries if e.matches(key)]
        return "fused" if matching and all(e.fused_at(tokens) for e in matching) else "split"


def qk_norm_rope_auto(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, *,
    dispatch: DispatchTable | None = None, **options,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``qk_norm_rope`` (one launch) or ``qk_norm_rope_split`` (three), as ``dispatch``
    says for this call's shape and token count; the fused route without a table.

    Same arguments and contract as ``qk_norm_rope`` (``options``: eps, rotary_dim, style,
    weight_mode, mrope_section, mrope_layout, inplace, q_out, k_out, check_positions, pdl,
    the last for the fused route only); the two routes are bit-identical, so only the time
    differs.
    """
    if dispatch is not None and not isinstance(dispatch, DispatchTable):
        raise TypeError(f"dispatch must be a DispatchTable (DispatchTable.load(path)) or None, "
                        f"got {type(dispatch).__name__}")
    route = "fused" if dispatch is None else dispatch.route(q, k, **options)
    if route == "split" and "pdl" in options:
        # PDL is an option of the fused launch; the split route's three launches take none,
        # but a call is valid or not whichever route its T takes.
        check_pdl(options.pop("pdl"), q.device)
    op = qk_norm_rope if route == "fused" else qk_norm_rope_split
    return op(q, k, q_weight, k_weight, positions, cos_sin_cache, **options)
