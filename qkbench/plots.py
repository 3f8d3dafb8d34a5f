"""Pictures of an archive: three PNGs per comparison, drawn from its summary.

- ``delta``: each geometry's per-pass delta against T (log), the null band (± the cell's
  width) shaded, kept passes as dots, dropped passes hollow, the estimate as a
  line, and cells without a verdict (unstable, unmeasured, invalid, n/s) marked;
- ``time``: each route's per-call time against T, with the device's launch floor;
- ``bandwidth``: each route's achieved bandwidth against T, with the copy bandwidth and,
  per geometry, the width at which its q and k stop fitting the L2.

Drawn with matplotlib's Agg canvas (no display, no pyplot state); nothing here prints.
"""

import re
from collections import defaultdict
from math import ceil
from pathlib import Path
from statistics import median

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullLocator

from qkbench.protocol import cache_of, rebuild
from qkbench.summary import current, used_rows

KINDS = ("delta", "time", "bandwidth")
VERDICTS_WITH_ESTIMATE = ("faster", "slower", "unresolved")
DPI = 110


def _identity(archive: dict) -> str:
    """protocol, device, commit (and when): what every title names."""
    env = archive["environment"]
    device = (env.get("gpu") or {}).get("name") or env.get("device", "?")
    code = env.get("code", {})
    commit = (code.get("commit") or "unknown")[:12] + (" (dirty)" if code.get("dirty") else "")
    created = (archive.get("created") or "")[:10]
    name = archive["protocol"]["resolved"].get("name")
    return (f"protocol {name} · cache {cache_of(archive)} · {device} · commit {commit}"
            + (f" · {created}" if created else ""))


def _case_bytes(archive: dict) -> dict[str, dict]:
    """Case key -> its byte counts: each route's bytes moved, and q + k (half the copy's)."""
    out = {}
    for p in archive["passes"]:
        for case in p.get("cases", []):
            if case["key"] not in out and "bytes" in case and "copy" in case:
                out[case["key"]] = {**case["bytes"], "qk": case["copy"]["bytes"] / 2}
    return out


def _geometries(archive: dict) -> dict[str, str]:
    """Geometry name -> its shape in words, e.g. ``(16,2)x256/r64 bfloat16``."""
    proto = rebuild(archive["protocol"])
    return {g.name: f"{g.label} {proto.dtype}" for g in proto.geometries}


def _by_geometry(comp: dict) -> dict[str, list[dict]]:
    out = defaultdict(list)
    for cell in comp["cases"]:
        out[cell["geometry"]].append(cell)
    return {g: sorted(cells, key=lambda c: c["tokens"]) for g, cells in out.items()}


def _log_x(ax, tokens: list[int]) -> None:
    """A log T axis ticked at the measured widths; a width too close to the last labelled
    one (less than 1.3x) keeps its tick but not its label."""
    ax.set_xscale("log")
    ticks = sorted(set(tokens))
    labels, last = [], None
    for t in ticks:
        shown = last is None or t >= 1.3 * last
        labels.append(str(t) if shown else "")
        last = t if shown else last
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ticks, labels, rotation=45 if len(ticks) > 6 else 0)
    ax.set_xlim(ticks[0] / 1.4, ticks[-1] * 1.4)


def _steps(points: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
    """A step outline of per-cell values on a log axis: each cell's value held from
    halfway (geometrically) to its left neighbour to halfway to its right one."""
    xs, ys = [], []
    for i, (x, y) in enumerate(points):
        left = (points[i - 1][0] * x) ** 0.5 if i else x / 1.2
        right = (points[i + 1][0] * x) ** 0.5 if i + 1 < len(points) else x * 1.2
        xs += [left, right]
        ys += [y, y]
    return xs, ys


def _times(cell: dict) -> tuple[dict | None, bool]:
    """The cell's per-call times in us and whether they carry a verdict: the summary's, or
    for a cell without one the median over its measured passes (drawn hollow)."""
    if "time_us" in cell:
        return cell["time_us"], True
    rows = cell["passes"]
    if not rows:
        return None, False
    return {role: median(r[f"{role}_s"] for r in rows) * 1e6
            for role in ("baseline", "candidate", "copy")}, False


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI)
    return path


def _delta_figure(archive: dict, comp: dict, shapes: dict[str, str]) -> Figure:
    groups = _by_geometry(comp)
    cols = min(2, len(groups))
    rows = ceil(len(groups) / cols)
    fig = Figure(figsize=(6.4 * cols, 3.8 * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[len(groups):]:
        ax.set_visible(False)
    for ax, (geometry, cells) in zip(axes, groups.items(), strict=False):
        tokens = [c["tokens"] for c in cells]
        banded = [(c["tokens"], c["effect"]["width"] * 100) for c in cells
                  if c["effect"]["width"] is not None]
        if banded:
            xs, ws = _steps(banded)
            ax.fill_between(xs, [-w for w in ws], ws, color="0.5", alpha=0.4, lw=0,
                            label="null band (± the cell's width)")
        ax.axhline(0, color="0.3", lw=0.8)
        # A slot is filled by its first kept attempt; a pass that measured the cell again
        # (it replaced another comparison's slot) is kept but outside the balanced set.
        rows = [(c["tokens"], r["delta"] * 100,
                 "dropped" if not r["kept"] else "used" if r in used_rows(c) else "again")
                for c in cells for r in c["passes"]]
        kept, again, dropped = ([(t, d) for t, d, kind in rows if kind == which]
                                for which in ("used", "again", "dropped"))
        if kept:
            ax.scatter(*zip(*kept, strict=True), s=14, color="tab:blue", alpha=0.7, lw=0,
                       label="kept pass", zorder=3)
        if again:
            ax.scatter(*zip(*again, strict=True), s=14, color="0.55", marker="d", lw=0,
                       label="measured again, not in the balanced set", zorder=3)
        if dropped:
            ax.scatter(*zip(*dropped, strict=True), s=30, facecolors="none",
                       edgecolors="tab:red", lw=1.0, label="dropped pass", zorder=3)
        estimated = [(c["tokens"], c["effect"]["estimate"] * 100) for c in cells
                     if c["effect"]["estimate"] is not None]
        if estimated:
            ax.plot(*zip(*estimated, strict=True), color="black", lw=1.0, marker="_", ms=10,
                    label="estimate (mean log ratio)", zorder=4)
        no_verdict = [c for c in cells if c["effect"]["verdict"] not in VERDICTS_WITH_ESTIMATE]
        for i, c in enumerate(no_verdict):
            ax.scatter([c["tokens"]], [0], marker="X", s=70, color="tab:orange",
                       edgecolors="black", lw=0.5, zorder=5,
                       label="no verdict (unstable, unmeasured, invalid, n/s)" if i == 0
                       else None)
            ax.annotate(c["effect"]["verdict"], (c["tokens"], 0), xytext=(0, 8 + 9 * (i % 2)),
                        textcoords="offset points", ha="center", fontsize=7,
                        color="tab:orange")
        _log_x(ax, tokens)
        ax.set_title(f"{geometry}  {shapes.get(geometry, '')}", fontsize=10)
        ax.set_xlabel("tokens T (log scale)")
        ax.set_ylabel("delta = candidate / baseline - 1 (%)")
        ax.grid(True, alpha=0.3)
    handles, labels = {}, {}
    for ax in axes[:len(groups)]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
            labels[label] = label
    # At most three entries a row in a figure one plot wide: longer rows are cut off.
    fig.legend(list(handles.values()), list(labels), loc="outside lower center",
               ncols=min(3 * cols, len(handles)), fontsize=8)
    fig.suptitle(f"{comp['baseline']} → {comp['candidate']}: per-pass delta by T\n"
                 f"{_identity(archive)}", fontsize=11)
    return fig


def _route_lines(ax, comp: dict, value, colors: dict[str, str]) -> list[int]:
    """Each geometry's baseline (dashed) and candidate (solid) against T; ``value(cell,
    role)`` gives the y value or None. Cells without a verdict are drawn hollow."""
    all_tokens = []
    for geometry, cells in _by_geometry(comp).items():
        color = colors[geometry]
        for role, style, marker in (("baseline", "--", "o"), ("candidate", "-", "s")):
            points = [(c["tokens"], value(c, role), ok) for c in cells
                      for ok in [_times(c)[1]] if value(c, role) is not None]
            if not points:
                continue
            xs, ys, oks = zip(*points, strict=True)
            all_tokens += xs
            ax.plot(xs, ys, ls=style, color=color, lw=1.2)
            ax.scatter([x for x, ok in zip(xs, oks, strict=True) if ok],
                       [y for y, ok in zip(ys, oks, strict=True) if ok],
                       marker=marker, color=color, s=18, zorder=3)
            ax.scatter([x for x, ok in zip(xs, oks, strict=True) if not ok],
                       [y for y, ok in zip(ys, oks, strict=True) if not ok],
                       marker=marker, facecolors="none", edgecolors=color, s=30, zorder=3)
    return all_tokens


def _legend(ax, comp: dict, colors: dict[str, str], shapes: dict[str, str],
            extra: list[tuple[Line2D, str]]) -> None:
    entries = [(Line2D([], [], color=c, lw=2), f"{g} {shapes.get(g, '')}")
               for g, c in colors.items()]
    entries += [(Line2D([], [], color="0.2", ls="--", marker="o", ms=4), comp["baseline"]),
                (Line2D([], [], color="0.2", ls="-", marker="s", ms=4), comp["candidate"]),
                (Line2D([], [], color="0.2", ls="", marker="o", mfc="none", ms=5),
                 "cell without a verdict (median of its passes)"),
                *extra]
    ax.legend(*zip(*entries, strict=True), fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _colors(comp: dict) -> dict[str, str]:
    names = list(_by_geometry(comp))
    return {g: f"C{i % 10}" for i, g in enumerate(names)}


def _time_figure(archive: dict, comp: dict, limits: dict | None,
                 shapes: dict[str, str]) -> Figure:
    fig = Figure(figsize=(10, 5.2), layout="constrained")
    ax = fig.subplots()
    colors = _colors(comp)

    def value(cell: dict, role: str) -> float | None:
        times = _times(cell)[0]
        return None if times is None else times[role]

    tokens = _route_lines(ax, comp, value, colors)
    extra = []
    floors = (limits or {}).get("launch_floor_us", {})
    for (name, us), style in zip(floors.items(), (":", "-."), strict=False):
        ax.axhline(us, color="0.35", ls=style, lw=1.0)
        extra.append((Line2D([], [], color="0.35", ls=style),
                      f"launch floor, {name.replace('_', ' ')} ({us:.2f} µs)"))
    if tokens:
        _log_x(ax, tokens)
    ax.set_yscale("log")
    ax.set_xlabel("tokens T (log scale)")
    ax.set_ylabel("per-call time (µs, log scale)")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax, comp, colors, shapes, extra)
    fig.suptitle(f"{comp['baseline']} vs {comp['candidate']}: per-call time by T, "
                 f"against the launch floor\n{_identity(archive)}", fontsize=11)
    return fig


def _bandwidth_figure(archive: dict, comp: dict, limits: dict | None,
                      shapes: dict[str, str]) -> Figure:
    fig = Figure(figsize=(10, 5.2), layout="constrained")
    ax = fig.subplots()
    colors = _colors(comp)
    nbytes = _case_bytes(archive)
    routes = {"baseline": comp["baseline"], "candidate": comp["candidate"]}

    def value(cell: dict, role: str) -> float | None:
        if "bandwidth" in cell:
            return cell["bandwidth"][role]["route_gbps"]
        times, moved = _times(cell)[0], nbytes.get(cell["key"], {}).get(routes[role])
        return None if times is None or moved is None else moved / (times[role] * 1e-6) / 1e9

    tokens = _route_lines(ax, comp, value, colors)
    extra = []
    if limits:
        ax.axhline(limits["copy_gbps"], color="0.2", ls=":", lw=1.2)
        extra.append((Line2D([], [], color="0.2", ls=":"),
                      f"copy bandwidth ({limits['copy_gbps']:.0f} GB/s, read + written)"))
    l2 = (archive["environment"].get("gpu") or {}).get("l2_bytes")
    if l2 and tokens and cache_of(archive) == "cold":
        # Whether a cell's rows fit the L2 does not matter: each arm cycles over input sets
        # that sweep twice the L2 before one comes round again.
        extra.append((Line2D([], [], ls=""), "cold cache: every cell's rows come from DRAM"))
    elif l2 and tokens:
        lo, hi = min(tokens), max(tokens)
        fills_at = []
        for geometry, cells in _by_geometry(comp).items():
            per_token = [nbytes[c["key"]]["qk"] / c["tokens"] for c in cells
                         if c["key"] in nbytes]
            if not per_token:
                continue
            fills = l2 / per_token[0]  # the width at which q + k fill the L2
            fills_at.append(fills)
            if lo <= fills <= hi:
                ax.axvline(fills, color=colors[geometry], ls=(0, (2, 2)), lw=1.0)
                ax.annotate(f"L2 {l2 / 2**20:.0f} MiB", (fills, 0.02), rotation=90,
                            xycoords=("data", "axes fraction"), fontsize=7, ha="right",
                            va="bottom", color=colors[geometry])
        mib = f"{l2 / 2**20:.0f} MiB"
        if any(lo <= f <= hi for f in fills_at):
            extra.append((Line2D([], [], color="0.3", ls=(0, (2, 2))),
                          f"q + k = L2 ({mib}): left of it the cell's rows can be "
                          "L2-resident"))
        elif fills_at and all(f > hi for f in fills_at):
            extra.append((Line2D([], [], ls=""), f"every cell's q + k fits the L2 ({mib})"))
        elif fills_at and all(f < lo for f in fills_at):
            extra.append((Line2D([], [], ls=""), f"no cell's q + k fits the L2 ({mib})"))
    if tokens:
        _log_x(ax, tokens)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens T (log scale)")
    ax.set_ylabel("achieved bandwidth (GB/s: the route's bytes / per-call time)")
    ax.grid(True, alpha=0.3)
    _legend(ax, comp, colors, shapes, extra)
    fig.suptitle(f"{comp['baseline']} vs {comp['candidate']}: achieved bandwidth by T, "
                 f"against the copy bandwidth\n{_identity(archive)}", fontsize=11)
    return fig


def archive_stem(path: Path) -> str:
    """An archive's name without ``.json`` / ``.json.gz``: the plots' default prefix."""
    name = Path(path).name
    for suffix in (".json.gz", ".json", ".gz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _slug(text: str) -> str:
    # Letters of any script stay: names that differ only in them must not collide.
    return re.sub(r"[^\w.-]+", "-", text).strip("-")


def plot(archive: dict, out_dir: Path, prefix: str | None = None) -> list[Path]:
    """Write the three PNGs of every comparison of ``archive`` into ``out_dir`` (created
    if missing, files of the same name replaced); returns their paths in order.

    Files are named ``<prefix>-<baseline>-vs-<candidate>-<kind>.png``, ``prefix`` by
    default the protocol's name.
    """
    summary = current(archive) or {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = (_slug(prefix or "") or _slug(archive["protocol"]["resolved"].get("name") or "")
              or "run")
    shapes = _geometries(archive)
    limits = summary.get("limits")
    written = []
    for comp in summary.get("comparisons", []):
        if not comp["cases"]:
            continue
        stem = f"{prefix}-{_slug(comp['baseline'])}-vs-{_slug(comp['candidate'])}"
        figures = {"delta": _delta_figure(archive, comp, shapes),
                   "time": _time_figure(archive, comp, limits, shapes),
                   "bandwidth": _bandwidth_figure(archive, comp, limits, shapes)}
        for kind in KINDS:
            written.append(_save(figures[kind], out_dir / f"{stem}-{kind}.png"))
    return written
