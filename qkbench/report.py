"""Reports of an archive: plain tables, rendered by rich for a terminal or as Markdown."""

from dataclasses import dataclass, field

from rich.console import Group
from rich.table import Table as RichTable
from rich.text import Text

CPU_NOTE = ("Measured on the CPU: the Triton routes ran in the interpreter, so these figures "
            "say nothing about GPU kernels; they only exercise the method.")

VERDICT_STYLE = {"faster": "green", "slower": "red", "invalid route": "bold red"}


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)


def _pct(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "-"
    return f"{x * 100:+.2f}%" if signed else f"{x * 100:.2f}%"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def header(archive: dict) -> dict:
    """Who measured what, where: the run's identity beside its summary (``--format json``)."""
    env, settings, protocol = archive["environment"], archive["settings"], archive["protocol"]
    code = env["code"]
    return {"status": archive["status"], "created": archive.get("created"),
            "protocol": {"name": protocol["resolved"].get("name"), "path": protocol.get("path"),
                         "sha256": protocol["sha256"]},
            "device": settings["device"], "gpu": env.get("gpu", {}).get("name"),
            "commit": code.get("commit"), "dirty": code.get("dirty"),
            "qkbench": env.get("qkbench"), "torch": env.get("torch"),
            "triton": env.get("triton"), "settings": settings}


def header_lines(archive: dict) -> list[str]:
    env, settings = archive["environment"], archive["settings"]
    gpu = env.get("gpu", {}).get("name", env["device"])
    code = env["code"]
    commit = (code["commit"] or "unknown")[:12] + (" (dirty)" if code.get("dirty") else "")
    summary = archive["summary"] or {}
    passes = summary.get("passes", {"ok": 0, "failed": 0})
    lines = [
        f"protocol {archive['protocol']['resolved']['name']} "
        f"(sha256 {archive['protocol']['sha256'][:12]}), status {archive['status']}",
        f"device {gpu}; torch {env['torch']}, triton {env['triton']}, commit {commit}",
        f"schedule {settings['schedule']}, isolation {settings['isolation']}; "
        f"passes ok {passes['ok']}, failed {passes['failed']}",
    ]
    limits = summary.get("limits")
    if limits:
        floors = ", ".join(f"{k.replace('_', ' ')} {v:.2f} us"
                           for k, v in limits["launch_floor_us"].items())
        lines.append(f"limits: copy {limits['copy_gbps']:.0f} GB/s "
                     f"({limits['copy_bytes'] / 2**30:.2f} GiB read + written); "
                     f"launch floor {floors}")
    if settings["device"].startswith("cpu"):
        lines.append(CPU_NOTE)
    return lines


def unsupported_cells(archive: dict) -> dict[tuple[str, str, str], str]:
    """(baseline, candidate, case key) -> why, for every cell that a route of its comparison
    declared unsupported (shown "n/s", not as a wrong route)."""
    out = {}
    for p in archive["passes"]:
        for case in p.get("cases", []):
            for comp in case.get("comparisons", []):
                for route, why in comp.get("unsupported", {}).items():
                    out[(comp["baseline"], comp["candidate"], case["key"])] = f"{route}: {why}"
    return out


def tables(archive: dict) -> list[Table]:
    out = []
    unsupported = unsupported_cells(archive)
    for comp in (archive["summary"] or {}).get("comparisons", []):
        name = f"{comp['baseline']} -> {comp['candidate']}"
        cases = Table(f"{name}: per cell (delta = candidate / baseline - 1; "
                      "width = worst kept |null|)",
                      ["geometry", "T", "kept", f"{comp['baseline']} us",
                       f"{comp['candidate']} us", "delta", "best", "worst", "95% CI",
                       "width", "verdict", "copy us", "cand. share of copy BW"])
        for c in comp["cases"]:
            e, t = c["effect"], c.get("time_us", {})
            bw = c.get("bandwidth", {}).get("candidate", {})
            ci = (f"[{_pct(e['ci_low'])}, {_pct(e['ci_high'])}]"
                  if e["ci_low"] is not None else "-")
            verdict = e["verdict"] if not c["invalid_passes"] else (
                "n/s" if (comp["baseline"], comp["candidate"], c["key"]) in unsupported
                else "invalid route")
            cases.rows.append([c["geometry"], str(c["tokens"]), f"{e['kept']}/{e['total']}",
                               _num(t.get("baseline")), _num(t.get("candidate")),
                               _pct(e["median"]), _pct(e["best"]), _pct(e["worst"]), ci,
                               _pct(e["width"], False), verdict, _num(t.get("copy")),
                               _pct(bw.get("share_of_copy"), False)])
        out.append(cases)
        if comp["bands"]:
            bands = Table(f"{name}: bands", ["band", "cells", "median", "best", "worst",
                                             "faster"])
            for b in comp["bands"]:
                bands.rows.append([b["name"], str(b["cells"]), _pct(b["median"]),
                                   _pct(b["best"]), _pct(b["worst"]),
                                   f"{b['faster']}/{b['cells']}"])
            out.append(bands)
        cross = Table(f"{name}: crossover", ["geometry", "faster through T", "stops at T"])
        for g, x in comp["crossover"].items():
            cross.rows.append([g, _num(x["faster_through"], "d"), _num(x["stops_at"], "d")])
        out.append(cross)
    return out


def comparison_lines(archive: dict) -> list[str]:
    lines = []
    for comp in (archive["summary"] or {}).get("comparisons", []):
        d, w = comp["drops"], comp["width"]
        bound = comp["dispatch_bound"]
        lines.append(
            f"{comp['baseline']} -> {comp['candidate']}: dropped {d['dropped']} of {d['total']} "
            f"(pass, cell) pairs; instrument width worst kept {_pct(w['worst'], False)}, "
            f"median {_pct(w['median'], False)}; recommended dispatch bound: "
            + (f"T <= {bound}" if bound is not None else "none"))
    return lines


def failures(archive: dict) -> list[str]:
    lines = []
    for p in archive["passes"]:
        if p["status"] != "ok":
            said = [*p.get("stderr_head", []), *p.get("stderr_tail", [])] or ["no output"]
            lines.append(f"pass {p['index']} failed (exit {p.get('returncode')}): {said[-1]}")
        for c in p.get("cases", []):
            if "error" in c:
                lines.append(f"pass {p['index']} {c['key']}: {c['error']}")
            for name, check in c.get("verification", {}).items():
                if not check["ok"] and "unsupported" not in check:
                    lines.append(f"pass {p['index']} {c['key']}: route {name} is wrong: "
                                 f"{check}")
    return lines


def not_supported(archive: dict) -> list[str]:
    """One line per cell a route does not support (n/s), with its reason."""
    return [f"n/s {base} -> {cand} {key}: {why}"
            for (base, cand, key), why in sorted(unsupported_cells(archive).items())]


def as_rich(archive: dict) -> Group:
    parts = [Text(line) for line in header_lines(archive)]
    for table in tables(archive):
        rt = RichTable(title=table.title, title_justify="left")
        for i, h in enumerate(table.headers):
            rt.add_column(h, justify="left" if i == 0 else "right")
        verdict = table.headers.index("verdict") if "verdict" in table.headers else None
        for row in table.rows:
            style = None if verdict is None else VERDICT_STYLE.get(row[verdict])
            rt.add_row(*row, style=style)
        parts.append(rt)
    parts += [Text(line) for line in comparison_lines(archive) + not_supported(archive)]
    parts += [Text(line, style="red") for line in failures(archive)]
    return Group(*parts)


def as_markdown(archive: dict) -> str:
    out = [f"- {line}" for line in header_lines(archive)]
    for table in tables(archive):
        out += ["", f"**{table.title}**", "", "| " + " | ".join(table.headers) + " |",
                "|" + "|".join("---" for _ in table.headers) + "|"]
        out += ["| " + " | ".join(row) + " |" for row in table.rows]
    out += [""] + [f"- {line}" for line in
                   comparison_lines(archive) + not_supported(archive) + failures(archive)]
    return "\n".join(out) + "\n"
