"""The dispatch a run measured: per geometry, where the candidate stops being faster.

``dispatch_table(archive)`` turns a run's crossover (``summary.comparisons[i].crossover``)
into the table ``qkbench.kernels.dispatch.DispatchTable`` loads: each geometry's shape
(what the op's arguments determine, plus its layout), the largest width through which the
candidate was resolvably faster from the smallest one (``fused_through``), the width where
that stopped (``stops_at``), whether the bound is censored (it never stopped within the
measured range) and each measured width's verdict; with the protocol, device and commit
it came from. Nothing here prints.
"""

import json
import os
import zlib
from pathlib import Path

from qkbench.archive import decode
from qkbench.errors import QkbenchError
from qkbench.files import check_target, write_whole
from qkbench.kernels.dispatch import KIND, VERSION
from qkbench.protocol import rebuild
from qkbench.report import header
from qkbench.summary import current

RULE = ("fused where T <= fused_through, or at any T when censored (no crossover measured); "
        "split elsewhere, past the bound and on every shape this table does not list; "
        "without a table: fused everywhere")


def comparison(summary: dict, candidate: str | None) -> dict:
    """The comparison of ``candidate`` (by default the run's only one)."""
    comps = summary.get("comparisons", [])
    names = [c["candidate"] for c in comps]
    if candidate is None:
        if len(comps) != 1:
            raise QkbenchError(f"the run compares {len(comps)} candidates "
                               f"({', '.join(names) or 'none'}): name one with --candidate")
        return comps[0]
    for comp in comps:
        if comp["candidate"] == candidate:
            return comp
    raise QkbenchError(f"no comparison with candidate {candidate!r} in this run "
                       f"(candidates: {', '.join(names) or 'none'})")


def shape(geometry, dtype: str) -> dict:
    """A geometry's shape as a dispatch table matches calls on it (and its layout)."""
    return {"heads_q": geometry.heads_q, "heads_k": geometry.heads_k,
            "head_dim": geometry.head_dim, "rotary_dim": geometry.rotary, "dtype": dtype,
            "style": geometry.style, "weight_mode": geometry.weight_mode,
            "mrope_section": None if geometry.mrope_section is None
            else list(geometry.mrope_section),
            "mrope_layout": geometry.mrope_layout, "inplace": geometry.inplace,
            "packed": geometry.packed, "batch": geometry.batch}


def dispatch_table(archive: dict, candidate: str | None = None,
                   source: str | None = None) -> dict:
    """The dispatch table of one comparison of ``archive`` (see the module docstring);
    ``source`` names the archive's file."""
    summary = current(archive)
    if not summary:
        raise QkbenchError("the run has no summary yet: no pass has finished")
    comp = comparison(summary, candidate)
    proto = rebuild(archive["protocol"])
    geometries = {g.name: g for g in proto.geometries}
    entries = []
    for name, x in comp["crossover"].items():
        cells = sorted((c for c in comp["cases"] if c["geometry"] == name),
                       key=lambda c: c["tokens"])
        entries.append({
            "geometry": name, "shape": shape(geometries[name], proto.dtype),
            "fused_through": x["faster_through"], "stops_at": x["stops_at"],
            "censored": x["censored"],
            "measured": [{"tokens": c["tokens"], "verdict": c["effect"]["verdict"],
                          "estimate": c["effect"]["estimate"]} for c in cells]})
    who = header(archive)
    return {"kind": KIND, "version": VERSION,
            "baseline": comp["baseline"], "candidate": comp["candidate"], "rule": RULE,
            "source": {"archive": source, "protocol": who["protocol"],
                       "device": who["device"], "gpu": who["gpu"], "commit": who["commit"],
                       "dirty": who["dirty"],
                       "created": who["created"], "status": who["status"],
                       "schema_version": archive.get("schema_version")},
            "run_dispatch_bound": {**comp["dispatch_bound"],
                                   "margin": proto.dispatch_margin},
            "geometries": entries}


def describe(entry: dict, baseline: str = "split", candidate: str = "fused") -> str:
    """What the table does on one geometry, and why, in words (naming the comparison's
    routes)."""
    bound, stop = entry["fused_through"], entry["stops_at"]
    if bound is None and stop is None:
        return f"{baseline} everywhere (nothing measured)"
    if entry["censored"]:
        return f"{candidate} everywhere (no crossover up to T = {bound}: censored)"
    verdict = next(m["verdict"] for m in entry["measured"] if m["tokens"] == stop)
    resolved = verdict in ("slower", "unresolved")
    if bound is None:
        why = "not resolvably faster" if resolved else f"no verdict ({verdict})"
        return f"{baseline} everywhere ({why} at the smallest T measured, {stop})"
    return (f"{candidate} for T <= {bound}, {baseline} above (stops at T = {stop}"
            + ("" if resolved else f": no verdict there, {verdict}") + ")")


def write(path: Path, table: dict) -> None:
    """Write the table as JSON, whole or not at all, where no file is or over an earlier
    dispatch table; any other file there (the run's own archive, say) is refused."""
    path = Path(path)
    check_target(path, "--emit")
    if os.path.lexists(path) and not _is_table(path):
        raise QkbenchError(f"--emit {path}: exists and is not a dispatch table (a file "
                           "--emit wrote before), so it is not replaced; nothing was written")
    try:
        write_whole(path, lambda f: f.write(json.dumps(table, indent=1) + "\n"), replace=True)
    except OSError as e:
        raise QkbenchError(f"{path}: cannot write the dispatch table "
                           f"({e.strerror or e})") from None


def _is_table(path: Path) -> bool:
    try:
        data = decode(path.read_bytes())
    except (OSError, EOFError, zlib.error, ValueError):  # ValueError: JSON, Unicode
        return False
    return isinstance(data, dict) and data.get("kind") == KIND
