"""Reports of an archive: plain tables, rendered by rich for a terminal or as Markdown."""

import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table as RichTable
from rich.text import Text

from qkbench.audit import code_lines
from qkbench.neighbours import SMALL_TOKENS, baseline_beside
from qkbench.protocol import cache_of, launch_state_of, selection
from qkbench.summary import NOT_SUPPORTED, UNSTABLE, current, width_rule
from qkbench.verify import status_word

CPU_NOTE = ("Measured on the CPU: the Triton routes ran in the interpreter, so these figures "
            "say nothing about GPU kernels; they only exercise the method.")

SCHEMA_1_NOTE = ("A schema 1 archive: shown re-summarised by today's rules (no replacement "
                 "passes were run, so a dropped slot is unstable); its stored summary follows "
                 "the schema 1 rules, which audit checks.")

VERDICT_STYLE = {"faster": "green", "slower": "red", "invalid route": "bold red"}


@dataclass
class Table:
    """A plain table. ``compact`` names the columns a terminal shows by default (None: all;
    ``--wide`` shows all); the first ``keys`` columns identify a row and are repeated when
    a table too wide for the terminal is shown in parts; ``wrap`` names the columns whose
    text may wrap at its spaces (every other cell -- names, numbers -- stays whole);
    ``left`` the columns aligned left (the rest, numbers, align right)."""

    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    compact: list[int] | None = None
    keys: int = 1
    wrap: set[int] = field(default_factory=set)
    left: set[int] = field(default_factory=lambda: {0})


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
                         "sha256": protocol["sha256"], "cells_picked": selection(protocol)},
            "device": settings["device"], "gpu": (env.get("gpu") or {}).get("name"),
            "commit": code.get("commit"), "dirty": code.get("dirty"),
            "qkbench": env.get("qkbench"), "torch": env.get("torch"),
            "triton": env.get("triton"), "settings": settings,
            "cache": cache_of(archive),
            "launch_state": launch_state_of(archive)}


def header_lines(archive: dict) -> list[str]:
    env, settings = archive["environment"], archive["settings"]
    gpu = (env.get("gpu") or {}).get("name", env["device"])
    code = env["code"]
    commit = (code["commit"] or "unknown")[:12] + (" (dirty)" if code.get("dirty") else "")
    summary = current(archive) or {}
    passes = summary.get("passes", {"ok": 0, "failed": 0, "replacements": 0})
    lines = [
        f"protocol {archive['protocol']['resolved']['name']} "
        f"(sha256 {archive['protocol']['sha256'][:12]}), status {archive['status']}",
        f"device {gpu}; torch {env['torch']}, triton {env['triton']}, commit {commit}",
        f"schedule {settings['schedule']}, isolation {settings['isolation']}, cache "
        f"{cache_of(archive)}, launch state {launch_state_of(archive)}; "
        f"passes ok {passes['ok']}, failed {passes['failed']}, "
        f"replacements {passes.get('replacements', 0)}",
    ]
    picked = selection(archive["protocol"])
    if picked:
        lines.append(f"cells picked: {picked}")
    if not archive["passes"]:
        lines.append("no pass has finished yet: nothing to report")
    if archive.get("schema_version") == 1:
        lines.append(SCHEMA_1_NOTE)
    lines += code_lines(archive)  # only where passes ran other code (a resume let change it)
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


def _interval(e: dict) -> str:
    if e["best"] is None:
        return "-"
    return f"[{_pct(e['best'])}, {_pct(e['worst'])}]"


def _verdict(e: dict) -> str:
    if e["verdict"] == "unstable" and e["unstable_orders"]:
        return f"unstable ({'; '.join(e['unstable_orders'])})"
    return e["verdict"]


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
    for comp in (current(archive) or {}).get("comparisons", []):
        name = f"{comp['baseline']} -> {comp['candidate']}"
        coverages = {c["effect"]["coverage"] for c in comp["cases"]} - {None}
        cover = (f"{_pct(coverages.pop(), False)} interval" if len(coverages) == 1
                 else "interval")
        cases = Table(f"{name}: per cell (delta = candidate / baseline - 1, the mean log ratio "
                      f"over the balanced kept passes; median = their median delta; interval "
                      f"= [best, worst] kept delta, its coverage of the median delta; width = "
                      f"{width_rule(archive)}, and its median)",
                      ["geometry", "T", "kept", f"{comp['baseline']} us",
                       f"{comp['candidate']} us", "delta", "median", cover, "width",
                       "width median", "verdict", "copy us", "floor us",
                       *(f"{comp[role]} share of copy BW"
                         for role in ("baseline", "candidate"))],
                      compact=[0, 1, 3, 4, 5, 7, 8, 10], keys=2, wrap={7, 9, 10, 13, 14})
        for c in comp["cases"]:
            e, t = c["effect"], c.get("time_us", {})
            # Each route's rate on its own bytes (the split route moves more than fused).
            bw = c.get("bandwidth", {})
            cases.rows.append([c["geometry"], str(c["tokens"]), f"{e['kept']}/{e['total']}",
                               _num(t.get("baseline")), _num(t.get("candidate")),
                               _pct(e["estimate"]), _pct(e["median"]), _interval(e),
                               _pct(e["width"], False), _pct(e["width_median"], False),
                               _verdict(e), _num(t.get("copy")), _num(t.get("floor")),
                               *(_pct(bw.get(role, {}).get("share_of_copy"), False)
                                 for role in ("baseline", "candidate"))])
        out.append(cases)
        if comp["bands"]:
            bands = Table(f"{name}: bands", ["band", "cells", "median", "best", "worst",
                                             "faster", "unstable"], wrap={0})
            for b in comp["bands"]:
                bands.rows.append([b["name"], str(b["cells"]), _pct(b["median"]),
                                   _pct(b["best"]), _pct(b["worst"]),
                                   f"{b['faster']}/{b['cells']}", str(b["unstable"])])
            out.append(bands)
        cross = Table(f"{name}: crossover (a cell without a verdict ends the run)",
                      ["geometry", "faster through T", "stops at T"], wrap={2})
        for g, x in comp["crossover"].items():
            stop = ("no crossover in range" if x["censored"] else _num(x["stops_at"], "d"))
            cross.rows.append([g, _num(x["faster_through"], "d"), stop])
        out.append(cross)
    return out


def _bound(bound: dict) -> str:
    if bound["bound"] is None:
        return "none"
    if bound["censored"]:
        return f"no crossover up to T = {bound['bound']} (censored: not a measured crossover)"
    return f"T <= {bound['bound']}"


# Why a measured (pass, cell) pair was dropped (a row's ``drop_reason``), in words.
DROP_CAUSES = {"null": "null past the threshold", "throttled": "throttled"}


def _drop_causes(comparisons: list[dict]) -> Counter:
    """How many measured (pass, cell) pairs of ``comparisons`` were dropped for each cause."""
    return Counter(r["drop_reason"] for comp in comparisons for c in comp["cases"]
                   for r in c["passes"] if not r["kept"])


def comparison_lines(archive: dict) -> list[str]:
    lines = []
    for comp in (current(archive) or {}).get("comparisons", []):
        d, w, slot = comp["drops"], comp["width"], comp["slot_effect"]
        warn = " -- larger than the width: a warning about the machine" if slot[
            "beyond_width"] else ""
        causes = _drop_causes([comp])
        why = (f" ({', '.join(f'{DROP_CAUSES[r]} {n}' for r, n in causes.items())})"
               if causes.get("throttled") else "")
        lines.append(
            f"{comp['baseline']} -> {comp['candidate']}: dropped {d['dropped']} of {d['total']} "
            f"measured (pass, cell) pairs{why}, {d['replacements']} replacement attempts, "
            f"{d['unstable']} unstable cells; instrument width ({width_rule(archive)}) "
            f"{_pct(w['worst'], False)}, median {_pct(w['median'], False)}; slot effect "
            f"(first-sampled arm vs the later ones) {_pct(slot['estimate'])}{warn}; "
            f"{comp['flagged_rows']} (pass, cell) pairs with telemetry flags; "
            f"recommended dispatch bound: {_bound(comp['dispatch_bound'])}")
    return lines + neighbour_lines(archive)


def neighbour_lines(archive: dict) -> list[str]:
    """How the baseline reads beside each later candidate against beside the first, per
    token band; flagged where that is larger than the later comparison's width."""
    comparisons = (current(archive) or {}).get("comparisons", [])
    if len(comparisons) < 2:
        return []
    first = comparisons[0]["candidate"]
    width = {comp["candidate"]: comp["width"]["worst"] for comp in comparisons}
    lines = []
    for row in baseline_beside(archive):
        band = f"T <= {SMALL_TOKENS}" if row["small"] else f"T > {SMALL_TOKENS}"
        w = width.get(row["candidate"])
        warn = (" -- larger than the width: the candidates change how fast the baseline runs "
                "beside them, so their deltas are taken against different baselines"
                if w is not None and abs(row["median"]) > w else "")
        lines.append(
            f"{comparisons[0]['baseline']} beside {row['candidate']} against beside {first}, "
            f"{band}: {_pct(row['median'])} (median of {row['pairs']} (pass, cell) pairs, "
            f"{_pct(row['lowest'])} to {_pct(row['highest'])}){warn}")
    return lines


def _oracle_reasons(check: dict) -> list[str]:
    bound = check.get("bound")
    reasons = []
    for tensor, e in check.get("oracle", {}).items():
        if e.get("nan"):
            reasons.append(f"its {tensor} output holds NaN")
        elif bound is None:  # an archive from before the bound was recorded
            reasons.append(f"its {tensor} output is up to {e['worst']:.1e} of a row's scale "
                           "off the FP64 oracle")
        elif e["worst"] > bound["worst"]:
            reasons.append(f"its {tensor} output is up to {e['worst']:.1e} of a row's scale "
                           f"off the FP64 oracle (bound {bound['worst']:.1e})")
        elif e["relative"] > bound["relative"]:
            reasons.append(f"its {tensor} output is {e['relative']:.1e} off the FP64 oracle "
                           f"norm-wise (bound {bound['relative']:.1e})")
    return reasons


def route_problem(name: str, key: str, check: dict) -> str:
    """One sentence on why ``name`` failed verification on case ``key``."""
    if "error" in check:
        return f"route {name} raised on {key}: {check['error']}"
    reasons = []
    if check.get("differing_share"):
        reasons.append(f"{check['differing_share'] * 100:.3g} % of elements differ from "
                       f"{check.get('exact_with', 'its exact group')}")
    reasons += _oracle_reasons(check)
    return f"route {name} is wrong on {key}: {'; '.join(reasons) or 'it failed verification'}"


def invalid(archive: dict) -> list[str]:
    """One sentence per (route, case) that was not measured, with the passes it was in."""
    measured = [p for p in archive["passes"] if "cases" in p]
    found: dict[tuple[str, str], tuple[str, list[int]]] = {}
    for p in measured:
        for c in p["cases"]:
            if "error" in c:
                problems = {("", c["key"]): f"case {c['key']} was not measured: {c['error']}"}
            else:
                problems = {(name, c["key"]): route_problem(name, c["key"], check)
                            for name, check in c.get("verification", {}).items()
                            if status_word(check) == "WRONG"}
            for where, sentence in problems.items():
                found.setdefault(where, (sentence, []))[1].append(p["index"])
    return [f"{sentence} (in {len(passes)} of {len(measured)} passes)"
            for sentence, passes in found.values()]


def invalid_line(archive: dict, where: str) -> str | None:
    """The first of ``invalid``'s sentences, and how many more there are ``where``."""
    found = invalid(archive)
    if not found:
        return None
    more = len(found) - 1
    return found[0] + (f"; and {more} more invalid (route, case) pair{'s' * (more > 1)}, "
                       f"{where}" if more else "")


def no_verdict_line(archive: dict) -> str | None:
    """The sentence for a finished run in which no cell of any comparison got a verdict:
    every cell unstable (a pass order kept no pass within its retries), or every cell n/s
    (nothing measured), so nothing it measured can be read; None otherwise."""
    if archive["status"] != "complete":
        return None
    cells = [c["effect"]["verdict"] for comp in (current(archive) or {}).get("comparisons", [])
             for c in comp["cases"]]
    verdicts = [v for v in cells if v != NOT_SUPPORTED]
    if cells and not verdicts:
        return (f"no cell was measured: all {len(cells)} are n/s (a route supports none of "
                "them), so the run measured nothing a verdict can be read from")
    if not verdicts or any(v != UNSTABLE for v in verdicts):
        return None
    threshold = archive["protocol"]["resolved"]["timing"]["drop_threshold"]
    causes = _drop_causes(current(archive)["comparisons"])
    said = {"null": f"its null arm disagreed past the drop threshold {threshold:g}",
            "throttled": "the card reported throttling (timing.drop_throttled)"}
    why = [said[r] for r in said if causes.get(r)]
    if any(p["status"] != "ok" for p in archive["passes"]) or not why:
        why.append("its passes failed")
    return (f"no cell got a verdict: all {len(verdicts)} are unstable (in each, a pass "
            f"order kept no pass within its retries: {', or '.join(why)}), so the run "
            "measured nothing a verdict can be read from")


def failed_passes_line(archive: dict) -> str | None:
    """How many of the run's passes failed, and which (None where none did)."""
    failed = [p["index"] for p in archive["passes"] if p["status"] != "ok"]
    return (f"{len(failed)} of {len(archive['passes'])} passes failed (passes "
            f"{[i + 1 for i in failed]} as the progress lines count, archive indices {failed}; "
            "their output is in the archive)") if failed else None


def failures(archive: dict) -> list[str]:
    lines = []
    for p in archive["passes"]:
        if p["status"] != "ok":
            said = [*p.get("stderr_head", []), *p.get("stderr_tail", [])] or ["no output"]
            why = p.get("reason") or said[-1]  # e.g. "timed out after 1800 s"
            lines.append(f"pass {p['index'] + 1} (archive index {p['index']}) failed (exit "
                         f"{p.get('returncode')}): {why}")
    return lines + invalid(archive)


def not_supported(archive: dict) -> list[str]:
    """One line per cell a route does not support (n/s), with its reason."""
    return [f"n/s {base} -> {cand} {key}: {why}"
            for (base, cand, key), why in sorted(unsupported_cells(archive).items())]


class Fitted:
    """A table drawn so that no name or number is ever cut, whatever the width.

    At its natural width when that fits; else its wrappable columns (words: verdicts,
    intervals, headers) wrap at their spaces down to their longest word; and when even that
    is too wide, the table is shown in parts, each repeating the key columns. Names and
    numbers are never shortened to "..." (rich's default when it squeezes a table).
    """

    def __init__(self, table: Table, columns: list[int] | None = None):
        self.table = table
        self.columns = list(range(len(table.headers))) if columns is None else columns

    def _overhead(self, n: int) -> int:
        return 3 * n - 1  # a border between columns, padding 1 + 1 around each (no edges)

    def _needs(self, i: int) -> tuple[int, int, int]:
        """Column ``i``'s natural width, its cells' natural width (the header aside) and
        the least it can take without cutting a word."""
        t = self.table
        cells = [row[i] for row in t.rows]
        body = max([1, *map(cell_len, cells)])
        # A key (a geometry's name) may wrap at its spaces too: it is repeated in every
        # part, so one too long for the terminal would leave no room beside it.
        words = t.headers[i].split() + ([w for c in cells for w in c.split()]
                                         if i in t.wrap or i < t.keys else cells)
        return max(body, cell_len(t.headers[i])), body, max([1, *map(cell_len, words)])

    def _parts(self, width: int) -> list[list[int]]:
        """The columns of each part: all of them in one table if they fit (wrapping what
        may wrap); else parts packed at their columns' natural widths, each repeating the
        key columns."""
        needs = {i: self._needs(i) for i in self.columns}
        if sum(n[2] for n in needs.values()) + self._overhead(len(needs)) <= width:
            return [self.columns]
        keys = [i for i in self.columns if i < self.table.keys]

        def fits(part: list[int], least: bool) -> bool:
            return sum(needs[j][2 if least else 0] for j in part) + self._overhead(
                len(part)) <= width

        parts, part = [], list(keys)
        for i in self.columns:
            if i in keys:
                continue
            if not fits([*part, i], least=False) and len(part) > len(keys):
                parts.append(part)
                part = list(keys)
            part.append(i)
        return [*parts, part]

    def _widths(self, columns: list[int], width: int) -> list[int] | None:
        """Explicit widths when the natural ones do not fit: each column's least; then
        steps that put a whole column's cells, or its header, on one line, those that save
        the most wrapped lines per character first (an interval wrapped on every row
        before a header, a header before a verdict long on a few rows); then what room is
        left to the columns still short of their natural width."""
        needs = [self._needs(i) for i in columns]
        room = width - self._overhead(len(columns))
        if sum(n[0] for n in needs) <= room:
            return None
        widths = [n[2] for n in needs]

        def saved(j: int, goal: int) -> int:
            """Lines saved by widening column j to ``goal`` (at least one)."""
            i = columns[j]
            texts = [row[i] for row in self.table.rows] + [self.table.headers[i]]
            return max(1, sum(widths[j] < cell_len(t) <= goal for t in texts))

        while True:
            steps = [((goal - widths[j]) / saved(j, goal), goal - widths[j], j)
                     for j, n in enumerate(needs)
                     for goal in [min((g for g in n[:2] if g > widths[j]), default=None)]
                     if goal is not None and goal - widths[j] <= room - sum(widths)]
            if not steps:
                break
            _, step, j = min(steps)
            widths[j] += step
        for j in sorted(range(len(widths)), key=lambda j: widths[j] - needs[j][0]):
            widths[j] += max(0, min(needs[j][0] - widths[j], room - sum(widths)))
        return widths

    def render(self, width: int) -> list[RichTable]:
        t = self.table
        verdict = t.headers.index("verdict") if "verdict" in t.headers else None
        out = []
        for n, columns in enumerate(self._parts(width)):
            title = t.title if n == 0 else f"{t.title} (continued)"
            rt = RichTable(title=Text(title), title_justify="left", show_edge=False)
            widths = self._widths(columns, width) or [None] * len(columns)
            for i, w in zip(columns, widths, strict=True):
                # Headers wrap; a name or number cell never needs to (its column is at
                # least as wide as the widest of them).
                rt.add_column(Text(t.headers[i]), justify="left" if i in t.left else "right",
                              width=w, overflow="fold")
            for row in t.rows:
                style = None if verdict is None else VERDICT_STYLE.get(row[verdict].split()[0])
                rt.add_row(*(Text(row[i]) for i in columns), style=style)
            out.append(rt)
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.render(options.max_width)


def lines(archive: dict) -> dict[str, list[str]]:
    """What every rendering says beside the tables: the header (the run, its code, its
    limits), each comparison's drops, widths and bands (and how the baseline reads beside
    each candidate), the n/s cells and why, and the failed passes and invalid routes."""
    return {"header": header_lines(archive), "comparisons": comparison_lines(archive),
            "not_supported": not_supported(archive), "failures": failures(archive)}


def as_rich(archive: dict, wide: bool = False) -> Group:
    """The report for a terminal: the compact per-cell columns (geometry, T, times, delta,
    interval, width, verdict), or every column when ``wide``; never a cut name or number."""
    said = lines(archive)
    parts = [Text(line) for line in said["header"]]
    for table in tables(archive):
        parts.append(Fitted(table, None if wide else table.compact))
    parts += [Text(line) for line in said["comparisons"] + said["not_supported"]]
    parts += [Text(line, style="red") for line in said["failures"]]
    return Group(*parts)


# Characters Markdown would read as syntax in a name: a cell's end, emphasis, code, a link,
# an HTML tag, and the escape itself. Not ``_``: names and paths hold it inside words,
# where GitHub's Markdown reads it as written.
MD_SYNTAX = re.compile(r"([\\|*`\[\]<])")


def md_cell(text: str) -> str:
    """``text`` as one Markdown table cell (or bold line) that reads as written: a ``|``
    in a name would start another cell, a ``*`` emphasis, and so on."""
    return MD_SYNTAX.sub(r"\\\1", text)


def md_row(cells: list[str], bold: Collection[int] = ()) -> str:
    """One Markdown table row of ``cells`` as written, those at ``bold`` in bold."""
    return "| " + " | ".join(f"**{md_cell(c)}**" if i in bold else md_cell(c)
                             for i, c in enumerate(cells)) + " |"


def as_markdown(archive: dict) -> str:
    said = lines(archive)
    out = [f"- {md_cell(line)}" for line in said["header"]]
    for table in tables(archive):
        out += ["", f"**{md_cell(table.title)}**", "", md_row(table.headers),
                "|" + "|".join("---" for _ in table.headers) + "|"]
        out += [md_row(row) for row in table.rows]
    out += [""] + [f"- {md_cell(line)}" for line in
                   said["comparisons"] + said["not_supported"] + said["failures"]]
    return "\n".join(out) + "\n"


def calibration_table(result: dict) -> Table:
    """Per case: the A/A verdict, and each planted effect's estimate and verdict."""
    sizes = [p["nominal"] for p in result["cases"][0]["planted"]] if result["cases"] else []
    table = Table(f"calibrate {result['route']}: A/A ({result['route']} against itself) and "
                  "planted effects (+1/N of its own work)",
                  ["geometry", "T", "A/A delta", "A/A width", "A/A verdict",
                   *(f"planted {_pct(x)}" for x in sizes), "smallest resolved"],
                  keys=2, wrap={4, *range(5, 5 + len(sizes))})
    for c in result["cases"]:
        aa = c["aa"] or {}
        table.rows.append([c["geometry"], str(c["tokens"]), _pct(aa.get("estimate")),
                           _pct(aa.get("width"), False), aa.get("verdict", "-"),
                           *(f"{_pct(p['estimate'])} {p['verdict']}" for p in c["planted"]),
                           _pct(c["smallest_resolved"]) if c["smallest_resolved"] else "none"])
    return table
