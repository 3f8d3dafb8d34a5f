"""Protocols: the TOML files that declare what a sweep measures and how.

Loading validates every key: an unknown key or a wrong type is a ``ProtocolError`` that
names the file, the key and the expected type. The defaults below are the documented
measurement policy; every archive carries the resolved values.
"""

import hashlib
import math
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import tomllib

from qkbench.case import DTYPES, Case, Geometry
from qkbench.errors import ProtocolError, RouteError
from qkbench.kernels.checks import (
    FLOAT32_MAX,
    STYLES,
    WEIGHT_MODES,
    check_choice,
    check_head_dim,
    check_mrope_section,
    check_rotary_dim,
)
from qkbench.kernels.mrope import LAYOUTS
from qkbench.routes import planted_every
from qkbench.schedule import ORDERS

SCHEDULES = ("interleaved", "blocked")
ISOLATIONS = ("process", "inprocess")
CACHES = ("hot", "cold")
LAUNCH_STATES = ("as-found", "pdl")
TABLE_DTYPES = ("float32", "activation")
POSITION_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class Timing:
    """How each pass samples its arms (SPEC section 4)."""

    # A multiple of six: every arm order equally often.
    passes: int = 6
    warmup: int = 20
    samples: int = 200
    inner_reps: int = 32
    drop_threshold: float = 0.01
    # Replacement passes (same arm order) a dropped (pass, case) may get before the case
    # is unstable.
    retries: int = 2
    schedule: str = "interleaved"
    isolation: str = "process"
    cache: str = "hot"
    seed: int = 0
    # Rounds between two host synchronisations (and telemetry readings); the round after
    # each one is discarded as warm-up.
    chunk: int = 64
    # An arm whose SM clock moved by more than this share while it was timed, or whose
    # throttle reasons (other than idle) were set, is flagged; dropped if drop_throttled.
    clock_threshold: float = 0.02
    drop_throttled: bool = False
    # Seconds a pass's worker process may run (start-up included) before the manager ends
    # it and records the pass failed ("timed out after N s"); it is then replaced like any
    # failed pass. An in-process pass (isolation = "inprocess") cannot be timed out.
    pass_timeout: float = 1800.0
    # The launch state the arms are timed in. On the H200 a launch costs 0.18 us more after
    # a cell's verification (or a large fill of fresh memory) than after any PDL launch, and
    # the state sticks. "pdl" launches an empty kernel with PDL right before each comparison's
    # arms (and the copy reference) are timed, so every comparison runs in the state a PDL
    # arm would leave; "as-found" leaves the state to what ran before.
    launch_state: str = "as-found"


@dataclass(frozen=True)
class Band:
    """A named group of cells, by token range and optionally by geometry."""

    name: str
    tokens_min: int | None = None
    tokens_max: int | None = None
    geometries: tuple[str, ...] | None = None

    def holds(self, geometry: str, tokens: int) -> bool:
        return ((self.tokens_min is None or tokens >= self.tokens_min)
                and (self.tokens_max is None or tokens <= self.tokens_max)
                and (self.geometries is None or geometry in self.geometries))


@dataclass(frozen=True)
class Protocol:
    name: str
    routes: tuple[str, ...]
    tokens: tuple[int, ...]
    geometries: tuple[Geometry, ...]
    description: str = ""
    dtype: str = "bfloat16"
    table_dtype: str = "float32"
    positions_dtype: str = "int64"
    max_position: int = 8192
    eps: float = 1e-6
    timing: Timing = field(default_factory=Timing)
    bands: tuple[Band, ...] = ()
    # The dispatch bound needs the gain to exceed the instrument width this many times.
    dispatch_margin: float = 10.0
    text: str = ""
    path: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def baseline(self) -> str:
        return self.routes[0]

    @property
    def candidates(self) -> tuple[str, ...]:
        return self.routes[1:]

    def timed_calls(self) -> int:
        """The route calls the primary passes time (warm-ups included; a call is one to
        three kernel launches): per pass, case and comparison three arms of (warmup +
        samples) graph replays of inner_reps."""
        t = self.timing
        return (t.passes * len(self.cases()) * len(self.candidates) * 3
                * (t.warmup + t.samples) * t.inner_reps)

    def timed_elements(self) -> int:
        """The q and k elements those calls process, what a CPU run's time in the Triton
        interpreter grows with."""
        return self.timed_calls() // len(self.cases()) * sum(
            c.tokens * (c.geometry.heads_q + c.geometry.heads_k) * c.geometry.head_dim
            for c in self.cases())

    def cases(self) -> list[Case]:
        return [Case(g, t, self.dtype, self.table_dtype, self.positions_dtype,
                     self.max_position, self.eps)
                for g in self.geometries for t in self.tokens]

    def resolved(self) -> dict:
        """Every setting after defaults and overrides, as the archive records it."""
        data = asdict(self)
        del data["text"], data["path"]
        return data

    def record(self) -> dict:
        """The archive's ``protocol`` object: the text, where it came from, its hash and the
        resolved settings."""
        return {"path": self.path, "text": self.text, "sha256": self.sha256,
                "resolved": self.resolved()}

    def with_overrides(self, routes: list[str] | None = None, tokens: list[int] | None = None,
                       geometries: list[str] | None = None, **timing) -> "Protocol":
        """A copy with CLI overrides applied (``None`` values keep the protocol's):
        ``tokens`` replace the protocol's token counts, ``geometries`` keep only the named
        geometries (in the protocol's order; a band loses the others). With either, a band
        that holds none of the cells left goes."""
        changes = {k: v for k, v in timing.items() if v is not None}
        unknown = set(changes) - {f.name for f in fields(Timing)}
        if unknown:
            raise ProtocolError(f"unknown timing override(s): {sorted(unknown)}")
        proto = replace(self, timing=replace(self.timing, **changes))
        if routes:
            proto = replace(proto, routes=tuple(routes))
        whole = proto
        if tokens:
            picked = _int_list("overrides", "tokens", list(tokens))
            # In the protocol's order, so that its own token counts in any order are no pick.
            proto = replace(proto, tokens=tuple(sorted(picked, key=lambda t: (
                t not in whole.tokens, whole.tokens.index(t) if t in whole.tokens else t))))
        if geometries:
            proto = _selecting(proto, geometries)
        if proto is not whole:  # a band the pick left without a cell goes
            proto = replace(proto, bands=tuple(b for b in proto.bands if _holds_any(b, proto)))
        _check_semantics(proto, "overrides")
        return proto


def _holds_any(band: Band, p: Protocol) -> bool:
    return any(band.holds(c.geometry.name, c.tokens) for c in p.cases())


def _selecting(p: Protocol, names: list[str]) -> Protocol:
    """``p`` with only the geometries ``names`` names, and its bands' lists trimmed to them."""
    known = [g.name for g in p.geometries]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ProtocolError(f"overrides: 'geometries' names no geometry {unknown[0]!r} of "
                            f"protocol {p.name!r} (it has {', '.join(known)})")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ProtocolError(f"overrides: 'geometries' repeat {repeated}")
    bands = tuple(b if b.geometries is None else
                  replace(b, geometries=tuple(g for g in b.geometries if g in names))
                  for b in p.bands)
    return replace(p, geometries=tuple(g for g in p.geometries if g.name in names),
                   bands=bands)


def selection(recorded: dict) -> str | None:
    """How the cells an archive's header records (``recorded``, its ``protocol`` object)
    differ from its protocol text's (the overrides ``tokens`` and ``geometries``), in
    words; None where they do not."""
    whole = parse(recorded["text"], recorded.get("path") or "<protocol>")
    resolved = recorded["resolved"]
    tokens, names = resolved["tokens"], [g["name"] for g in resolved["geometries"]]
    parts = []
    if tuple(tokens) != whole.tokens:
        parts.append(f"tokens {', '.join(map(str, tokens))} (the protocol's: "
                     f"{', '.join(map(str, whole.tokens))})")
    if names != [g.name for g in whole.geometries]:
        parts.append(f"geometries {', '.join(names)} (of "
                     f"{', '.join(g.name for g in whole.geometries)})")
    return "; ".join(parts) or None


# Expected type of every key: (type, description) per table.
_TYPES = {int: "an integer", float: "a number", str: "a string", bool: "a boolean",
          list: "an array", dict: "a table"}

_TOP = {"name": str, "description": str, "routes": list, "tokens": list, "dtype": str,
        "table_dtype": str, "positions_dtype": str, "max_position": int, "eps": float,
        "dispatch_margin": float, "timing": dict, "geometry": list, "band": list}
_TIMING = {f.name: type(f.default) for f in fields(Timing)}
_GEOMETRY = {"name": str, "heads_q": int, "heads_k": int, "head_dim": int, "rotary_dim": int,
             "style": str, "weight_mode": str, "mrope_section": list, "mrope_layout": str,
             "inplace": bool, "packed": bool, "batch": int}
_BAND = {"name": str, "tokens_min": int, "tokens_max": int, "geometries": list}
_REQUIRED = {"top": ("name", "routes", "tokens", "geometry"),
             "geometry": ("name", "heads_q", "heads_k", "head_dim"), "band": ("name",)}


def _check_table(src: str, where: str, table: dict, schema: dict) -> dict:
    for key, value in table.items():
        name = f"{where}{key}"
        if key not in schema:
            raise ProtocolError(f"{src}: unknown key '{name}' (expected one of "
                                f"{', '.join(sorted(schema))})")
        want = schema[key]
        ok = isinstance(value, want) and not (want in (int, float) and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise ProtocolError(f"{src}: '{name}' must be {_TYPES[want]}, got "
                                f"{type(value).__name__} {value!r}")
    return table


def _require(src: str, where: str, table: dict, schema: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if key not in table:
            raise ProtocolError(f"{src}: missing required key '{where}{key}' "
                                f"({_TYPES[schema[key]]})")


def _int_list(src: str, name: str, values: list) -> tuple[int, ...]:
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                             for v in values):
        raise ProtocolError(f"{src}: '{name}' must be a non-empty array of integers >= 1")
    return tuple(values)


def _choice(src: str, name: str, value: str, choices) -> None:
    if value not in choices:
        raise ProtocolError(f"{src}: '{name}' must be one of {list(choices)}, got {value!r}")


def _geometry(src: str, i: int, table: dict) -> Geometry:
    where = f"geometry[{i}]."
    _check_table(src, where, table, _GEOMETRY)
    _require(src, where, table, _GEOMETRY, _REQUIRED["geometry"])
    data = dict(table)
    if "mrope_section" in data:  # its entries are checked with the kernels' rule below
        data["mrope_section"] = tuple(data["mrope_section"])
    geometry = Geometry(**data)
    try:
        _check_geometry(geometry)
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"{src}: geometry[{i}] ({geometry.name!r}): {e}") from None
    return geometry


def _check_geometry(g: Geometry) -> None:
    """The kernels' own rules on the options, so that a bad geometry fails at load."""
    for name in ("heads_q", "heads_k"):
        if getattr(g, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(g, name)}")
    if g.batch is not None and g.batch < 1:
        raise ValueError(f"batch must be >= 1, got {g.batch}")
    check_head_dim("head_dim", g.head_dim)
    check_choice("style", g.style, STYLES)
    check_choice("weight_mode", g.weight_mode, WEIGHT_MODES)
    check_choice("mrope_layout", g.mrope_layout, LAYOUTS)
    rotary = check_rotary_dim(g.rotary_dim, g.head_dim, g.style)
    if g.mrope_section is not None:
        check_mrope_section(g.mrope_section, rotary)


# The largest tensor a case may ask for, in elements (the kernels index with int64
# offsets, but a tensor this large is a typo, not a benchmark), and the most bytes one
# input set's q and k (the whole qkv buffer when packed) may take: verification holds an
# FP64 oracle of both (4x their bf16 bytes) and one output per route, the timed arms hold
# their own outputs out of place, so 8 GiB of inputs is already ~60 GiB at peak. Cold-cache
# copies are bounded apart from this (twice the L2, at most 16384 sets).
MAX_TENSOR_ELEMENTS = 2**31 - 1
MAX_INPUT_BYTES = 8 * 2**30
# Past these a value is a typo: a run's passes are held in memory to be summarised, and
# torch takes a seed of 64 signed bits.
# A pass plans every sample of every arm before it starts, and every replacement rewrites
# the archive.
MAX_COUNTS = {"passes": 600, "warmup": 10**6, "samples": 10**6, "inner_reps": 10**4,
              "retries": 10}
MAX_SEED = 2**63 - 1
# A protocol's name is part of its archives' file names: one plain word, never a path.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _check_size(p: Protocol, src: str) -> None:
    """Refuse token counts (and tables) whose tensors are too large to index sanely or
    to hold."""
    itemsize = DTYPES[p.dtype].itemsize
    for g in p.geometries:
        if p.max_position * g.rotary > MAX_TENSOR_ELEMENTS:
            raise ProtocolError(
                f"{src}: 'max_position' {p.max_position} on geometry {g.name!r}: its cos/sin "
                f"table would have {p.max_position * g.rotary:,} elements, more than "
                "2^31 - 1 per tensor")
        for tokens in p.tokens:
            shapes = ({"the packed qkv buffer": g.heads_q + 2 * g.heads_k} if g.packed else
                      {"q": g.heads_q, "k": g.heads_k})
            elements = {name: tokens * heads * g.head_dim for name, heads in shapes.items()}
            for name, n in elements.items():
                if n > MAX_TENSOR_ELEMENTS:
                    raise ProtocolError(
                        f"{src}: 'tokens' {tokens} on geometry {g.name!r}: {name} would have "
                        f"{n:,} elements, more than 2^31 - 1 per tensor")
            nbytes = sum(elements.values()) * itemsize
            if nbytes > MAX_INPUT_BYTES:
                raise ProtocolError(
                    f"{src}: 'tokens' {tokens} on geometry {g.name!r}: q and k would take "
                    f"{nbytes / 2**30:.1f} GiB of {p.dtype}, more than the "
                    f"{MAX_INPUT_BYTES // 2**30} GiB one case's inputs may take")


def _check_values(p: Protocol, src: str) -> None:
    """Values that would fail (or quietly mislead) only once a run has started."""
    if p.max_position < 1:
        raise ProtocolError(f"{src}: 'max_position' must be >= 1, got {p.max_position}")
    if not (math.isfinite(p.eps) and p.eps > 0):
        raise ProtocolError(f"{src}: 'eps' must be finite and > 0, got {p.eps}")
    if p.eps > FLOAT32_MAX:  # the kernels add it in float32
        raise ProtocolError(f"{src}: 'eps' must be finite in float32 (at most "
                            f"{FLOAT32_MAX:.4g}), got {p.eps}")
    if not (math.isfinite(p.dispatch_margin) and p.dispatch_margin >= 0):
        raise ProtocolError(f"{src}: 'dispatch_margin' must be finite and >= 0, "
                            f"got {p.dispatch_margin}")
    if not PLAIN_NAME.fullmatch(p.name):
        raise ProtocolError(f"{src}: 'name' must be one plain word of letters, digits, '.', "
                            f"'_' and '-' (it names the run's archive files), got {p.name!r}")
    named = [(f"geometry[{i}]", g.name) for i, g in enumerate(p.geometries)]
    named += [(f"band[{i}]", b.name) for i, b in enumerate(p.bands)]
    for where, name in named:
        if not name or name != name.strip() or not name.isprintable():
            # A space at an end would make --geometry "g" and the cell's name differ unseen.
            raise ProtocolError(f"{src}: '{where}.name' must be printable text, not blank and "
                                f"without spaces at its ends (it names cells in reports and "
                                f"JUnit XML), got {name!r}")
    if not 0 <= p.timing.seed <= MAX_SEED:
        raise ProtocolError(f"{src}: 'timing.seed' must be in [0, 2^63 - 1], "
                            f"got {p.timing.seed}")
    repeated = sorted({t for t in p.tokens if p.tokens.count(t) > 1})
    if repeated:
        raise ProtocolError(f"{src}: 'tokens' repeat {repeated} (each token count is one "
                            f"cell): {list(p.tokens)}")
    for i, b in enumerate(p.bands):
        if b.tokens_min is not None and b.tokens_max is not None and b.tokens_min > b.tokens_max:
            raise ProtocolError(f"{src}: band[{i}] ({b.name!r}): 'tokens_min' ({b.tokens_min}) "
                                f"is above 'tokens_max' ({b.tokens_max}), so it holds no cell")
        if b.geometries is not None:
            _distinct(src, f"band[{i}] ({b.name!r}): 'geometries' repeat", list(b.geometries))
        if not _holds_any(b, p):
            raise ProtocolError(f"{src}: band[{i}] ({b.name!r}) holds no cell of the protocol's "
                                f"(tokens {list(p.tokens)}, geometries "
                                f"{[g.name for g in p.geometries]}): a row of nothing")


def _distinct(src: str, what: str, names: list) -> None:
    if len(set(names)) != len(names):
        raise ProtocolError(f"{src}: {what}: {names}")


def _check_semantics(p: Protocol, src: str) -> None:
    t = p.timing
    for name in ("passes", "samples", "inner_reps"):
        if getattr(t, name) < 1:
            raise ProtocolError(f"{src}: 'timing.{name}' must be >= 1, got {getattr(t, name)}")
    for name, most in MAX_COUNTS.items():
        if getattr(t, name) > most:
            raise ProtocolError(f"{src}: 'timing.{name}' must be at most {most:,}, "
                                f"got {getattr(t, name):,}")
    if t.passes % len(ORDERS):
        raise ProtocolError(f"{src}: 'timing.passes' must be a multiple of {len(ORDERS)} "
                            f"(every arm order equally often), got {t.passes}")
    if t.chunk < 2:
        raise ProtocolError(f"{src}: 'timing.chunk' must be >= 2 (the round after each "
                            f"synchronisation is discarded), got {t.chunk}")
    for name in ("warmup", "retries"):
        if getattr(t, name) < 0:
            raise ProtocolError(f"{src}: 'timing.{name}' must be >= 0, got {getattr(t, name)}")
    if not 0 < t.clock_threshold < 1:
        raise ProtocolError(f"{src}: 'timing.clock_threshold' must be in (0, 1), "
                            f"got {t.clock_threshold}")
    if not (math.isfinite(t.pass_timeout) and t.pass_timeout > 0):
        raise ProtocolError(f"{src}: 'timing.pass_timeout' must be a finite number of "
                            f"seconds > 0, got {t.pass_timeout}")
    if not 0 < t.drop_threshold < 1:
        raise ProtocolError(f"{src}: 'timing.drop_threshold' must be in (0, 1), "
                            f"got {t.drop_threshold}")
    _choice(src, "timing.schedule", t.schedule, SCHEDULES)
    _choice(src, "timing.isolation", t.isolation, ISOLATIONS)
    _choice(src, "timing.cache", t.cache, CACHES)
    _choice(src, "timing.launch_state", t.launch_state, LAUNCH_STATES)
    _choice(src, "dtype", p.dtype, DTYPES)
    _choice(src, "table_dtype", p.table_dtype, TABLE_DTYPES)
    _choice(src, "positions_dtype", p.positions_dtype, POSITION_DTYPES)
    if len(p.routes) < 2:
        raise ProtocolError(f"{src}: 'routes' needs a baseline and at least one candidate, "
                            f"got {list(p.routes)}")
    if p.routes[0] in p.candidates:
        raise ProtocolError(f"{src}: the baseline {p.routes[0]!r} is also a candidate (a "
                            f"route against itself is the null arm already; for an A/A run "
                            f"use qkbench calibrate): {list(p.routes)}")
    for r in p.routes:
        try:
            every = planted_every(r)
        except RouteError as e:
            raise ProtocolError(f"{src}: {e}") from None
        if every is not None and t.inner_reps % every:
            raise ProtocolError(f"{src}: route {r!r}: N must divide 'timing.inner_reps' "
                                f"({t.inner_reps}), else its planted effect is not +1/N")
    _distinct(src, "candidate routes repeat", list(p.candidates))
    names = [g.name for g in p.geometries]
    _distinct(src, "geometry names repeat", names)
    _distinct(src, "band names repeat (each names a row of the report)",
              [b.name for b in p.bands])
    for g in p.geometries:
        uneven = [t for t in p.tokens if g.batch and t % g.batch]
        if uneven:
            raise ProtocolError(f"{src}: geometry {g.name!r}: tokens {uneven} are not a "
                                f"multiple of its batch ({g.batch})")
    for b in p.bands:
        for g in b.geometries or ():
            if g not in names:
                raise ProtocolError(f"{src}: band '{b.name}' names unknown geometry {g!r}")
    _check_values(p, src)
    _check_size(p, src)


def parse(text: str, src: str = "<protocol>") -> Protocol:
    """Parse and validate protocol TOML text; ``src`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProtocolError(f"{src}: not valid TOML: {e}") from None
    except RecursionError:
        raise ProtocolError(f"{src}: not valid TOML: nested too deeply") from None
    _check_table(src, "", data, _TOP)
    _require(src, "", data, _TOP, _REQUIRED["top"])
    routes = data["routes"]
    if not all(isinstance(r, str) and r for r in routes):
        raise ProtocolError(f"{src}: 'routes' must be an array of route names")
    timing = _check_table(src, "timing.", data.get("timing", {}), _TIMING)
    timing = Timing(**{k: float(v) if _TIMING[k] is float else v for k, v in timing.items()})
    if not all(isinstance(g, dict) for g in data["geometry"]) or not data["geometry"]:
        raise ProtocolError(f"{src}: 'geometry' must be a non-empty array of tables "
                            "([[geometry]]): each names the shapes of a row of cells")
    geometries = tuple(_geometry(src, i, g) for i, g in enumerate(data["geometry"]))
    bands = []
    for i, b in enumerate(data.get("band", [])):
        if not isinstance(b, dict):
            raise ProtocolError(f"{src}: 'band' must be an array of tables ([[band]])")
        _check_table(src, f"band[{i}].", b, _BAND)
        _require(src, f"band[{i}].", b, _BAND, _REQUIRED["band"])
        if "geometries" in b:
            b = {**b, "geometries": tuple(b["geometries"])}
        bands.append(Band(**b))
    scalars = {k: data[k] for k in ("description", "dtype", "table_dtype", "positions_dtype",
                                    "max_position", "eps", "dispatch_margin") if k in data}
    for k in ("eps", "dispatch_margin"):
        if k in scalars:
            scalars[k] = float(scalars[k])
    proto = Protocol(name=data["name"], routes=tuple(routes),
                     tokens=_int_list(src, "tokens", data["tokens"]), geometries=geometries,
                     timing=timing, bands=tuple(bands), text=text, path=src, **scalars)
    _check_semantics(proto, src)
    return proto


def rebuild(recorded: dict) -> Protocol:
    """The protocol an archive's header records: its text with the recorded routes, token
    counts, geometries and timing applied (``recorded`` is the archive's ``protocol`` object)."""
    resolved = recorded["resolved"]
    where = f"the archive's copy of {recorded.get('path') or 'its protocol'}"
    proto = parse(recorded["text"], where).with_overrides(
        routes=resolved["routes"], tokens=resolved["tokens"],
        geometries=[g["name"] for g in resolved["geometries"]], **resolved["timing"])
    return replace(proto, path=recorded.get("path") or "")


# The timing settings that change what a sample measures or which passes count, which a
# run's options may set apart from its protocol's text (``--cache``, ``--inner-reps``, ...).
# The sample and pass counts, retries, seed and pass timeout change only how precise or how
# robust a run is.
MEASURING_TIMING = ("cache", "inner_reps", "schedule", "isolation", "warmup", "chunk",
                    "drop_threshold", "clock_threshold", "drop_throttled")


def measuring_timing(archive: dict) -> dict[str, object]:
    """A run archive's ``MEASURING_TIMING`` settings: two runs that differ in one measured
    different things, whatever their protocol's text. A setting added since an archive was
    made is None there: what that run did instead is not on record, so it compares equal
    only with another such archive."""
    timing = archive["protocol"]["resolved"]["timing"]
    return {key: timing.get(key) for key in MEASURING_TIMING}


def launch_state_of(archive: dict) -> str:
    """The launch state a run archive's arms were timed in (an archive from before the
    setting records none, and ran as its default does)."""
    return archive["protocol"]["resolved"]["timing"].get("launch_state",
                                                         Timing.launch_state)


def cache_of(archive: dict) -> str:
    """Whether a run archive's arms were timed with the L2 hot or cold (an archive from
    before the setting records none, and ran hot)."""
    return archive["protocol"]["resolved"]["timing"].get("cache", Timing.cache)


def as_recorded(resolved: dict, recorded: dict) -> dict:
    """``resolved`` (a protocol's resolved settings) as ``recorded`` (an archive's record of
    them) would hold them: a timing setting added since that archive was made is absent from
    its record, and the run behaved as its default does, so it is left out where it is at
    its default. Any other value of it still shows as a difference."""
    defaults = asdict(Timing())
    timing = {k: v for k, v in resolved["timing"].items()
              if k in recorded["timing"] or v != defaults[k]}
    return {**resolved, "timing": timing}


def shipped() -> dict[str, str]:
    """The protocols shipped with qkbench, by name, as their TOML text."""
    folder = resources.files("qkbench.protocols")
    return {p.name.removesuffix(".toml"): p.read_text()
            for p in folder.iterdir() if p.name.endswith(".toml")}


def is_path(spec: str) -> bool:
    """Whether ``spec`` names a file: it has a path separator or ends in ``.toml``.

    Anything else is a bare name (``smoke``), which only ever means a shipped protocol.
    """
    separators = {"/", os.sep, os.altsep} - {None}
    return any(s in spec for s in separators) or spec.endswith(".toml")


def read_text(spec: str) -> str:
    """A protocol file's text; an unreadable or non-UTF-8 file is a ``ProtocolError``."""
    path = Path(spec)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ProtocolError(f"no protocol file {spec!r} (a path; a shipped protocol is "
                            f"named bare: {', '.join(sorted(shipped()))})") from None
    except IsADirectoryError:
        raise ProtocolError(f"{path}: is a directory, not a protocol file") from None
    except OSError as e:
        raise ProtocolError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"{path}: not a text protocol file (byte {e.start} is not "
                            "UTF-8)") from None


def load(spec: str) -> Protocol:
    """Load a protocol from a path, or by bare name from the shipped ones (``smoke``).

    A spec with a path separator or the ``.toml`` suffix is a path and must exist; a bare
    name is looked up among the shipped protocols only (a file of that name in the current
    directory is reached as ``./NAME``).
    """
    if is_path(spec):
        return parse(read_text(spec), str(Path(spec)))
    available = shipped()
    if spec in available:
        return parse(available[spec], f"protocols/{spec}.toml")
    hint = f"; the file is ./{spec}" if Path(spec).is_file() else ""
    raise ProtocolError(f"no protocol file {spec!r}: a bare name picks a shipped protocol "
                        f"({', '.join(sorted(available))}){hint}")
