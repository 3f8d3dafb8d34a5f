"""The CI gate's decisions (SPEC 5): pure functions over run summaries. Nothing here prints,
reads a file or runs anything; ``qkbench gate`` (``gate_cli``) does that and renders what
these functions return (``gate_output``).

Every form of the gate ends in one list of cells, each with an effect (a point estimate
and an interval), a width, a verdict and a result:

* **In one run** (``--against REF``, or an archive given alone): a cell as its run measured
  it -- the mean-log-ratio estimate of candidate / baseline - 1, the interval [best, worst]
  of its kept deltas, its width (``summary.width_rule``), the run's verdict.
* **Across two runs** (``--baseline A --candidate B``): per cell, the change of the
  candidate's effect relative to its own run's baseline route, ``(1 + e_B) / (1 + e_A) - 1``,
  which cancels drift that slows both routes of a run alike. Its interval is the
  conservative combination of the two runs' intervals, ``[(1 + best_B) / (1 + worst_A) - 1,
  (1 + worst_B) / (1 + best_A) - 1]``: each run's [best, worst] covers that run's median
  delta with probability 1 - 2^(1-n), so by the union bound the combined interval covers the
  ratio of the two median deltas with probability at least c_A + c_B - 1 (93.75 % for six
  passes each); the widths add. With ``absolute`` the same is done with the candidate's
  per-call times (its median, and [min_B / max_A - 1, max_B / min_A - 1] over the balanced
  kept passes); no null arm bounds the drift between two runs, so that mode says so. Either
  way the verdict is *slower* / *faster* only when the whole interval lies beyond the summed
  width on one side, else *unresolved*.
* **Expectations** (``--expect``): whether each selected cell of one run has the verdict a
  sentence claims; the grammar is in ``parse_expectation``.

A cell *regresses* when its verdict is slower and its whole interval lies beyond the
tolerance (the interval's lower end above +tolerance). A cell with no verdict (unstable,
unmeasured, pending, or an invalid baseline) is *inconclusive*; a cell whose candidate
computed a wrong result, or failed to run, *fails* whatever its timing (no tolerance nor
``--max-inconclusive`` passes it); a cell a route declared unsupported (n/s) is neither,
and is not counted.
"""

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

from qkbench.errors import FAIL, INCONCLUSIVE, PASS, GateError
from qkbench.protocol import launch_state_of, measuring_timing
from qkbench.summary import used_rows

# The verdict of a cell that a route does not support: no one's fault.
NOT_SUPPORTED = "n/s"
RESOLVED = ("faster", "slower", "unresolved")

# A cell's result in the gate.
OK, REGRESSED, UNDECIDED, SKIPPED, MET, NOT_MET, WRONG = (
    "pass", "regressed", "inconclusive", "n/s", "met", "not met", "wrong")
FAILING = (REGRESSED, NOT_MET, WRONG)


def pct(x: float | None, signed: bool = True, digits: int = 1) -> str:
    """``+7.1 %``: a ratio as a percentage (one decimal unless asked)."""
    if x is None:
        return "-"
    return f"{x * 100:{'+' if signed else ''}.{digits}f} %"


def parse_tolerance(text: str) -> float:
    """``2%`` (or ``2 %``) is 0.02; a bare number is a share and must be below 1 (``0.02``)."""
    s = text.strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise GateError(f"--tolerance {text!r}: give a percentage such as '2%' or a share "
                        "below 1 such as '0.02'") from None
    if not s.endswith("%") and value >= 1:
        raise GateError(f"--tolerance {text!r}: a bare number is a share and must be below 1 "
                        f"(for {value:g} percent write '{value:g}%')")
    if not math.isfinite(value) or value < 0:
        raise GateError(f"--tolerance {text!r}: must be a finite share >= 0")
    return value


@dataclass(frozen=True)
class Cell:
    """One (comparison, case) cell and what the gate made of it."""

    group: str  # the comparison ("fused@1a2b3c4d5e6f -> fused") or the expectation
    key: str
    geometry: str
    tokens: int
    verdict: str
    result: str
    reason: str
    estimate: float | None = None
    lo: float | None = None
    hi: float | None = None
    width: float | None = None
    coverage: float | None = None
    numbers: dict = field(default_factory=dict)  # more figures, for JUnit properties

    @property
    def label(self) -> str:
        return f"{self.geometry} T={self.tokens}"


def decide(verdict: str, lo: float | None, tolerance: float, width: float | None = None
           ) -> tuple[str, str]:
    """A cell's result under the regression rule, and why, in words (``width``: the cell's
    instrument width, named where it hides what the tolerance would catch)."""
    if verdict == NOT_SUPPORTED:
        return SKIPPED, "not supported by one of its routes"
    if verdict not in RESOLVED:
        return UNDECIDED, f"{verdict}: no verdict"
    if verdict == "slower" and lo is not None and lo > tolerance:
        return REGRESSED, (f"slower, its whole interval beyond the {pct(tolerance, False)} "
                           "tolerance")
    if verdict == "slower":
        return OK, (f"slower, but its interval reaches {pct(lo)}, within the "
                    f"{pct(tolerance, False)} tolerance")
    if verdict == "faster":
        return OK, "faster"
    if lo is not None and width is not None and lo > tolerance:
        return OK, (f"unresolved: its whole interval lies past the {pct(tolerance, False)} "
                    f"tolerance, but within the instrument's width ({pct(width, False)})")
    return OK, "unresolved: no change beyond the instrument width"


def _name(comp: dict) -> str:
    return f"{comp['baseline']} -> {comp['candidate']}"


# (baseline, candidate, case key) -> {route: the first pass that found it wrong}
# (``summary.wrong_routes``).
Wrong = Mapping[tuple[str, str, str], Mapping[str, int]]


def _wrong(wrong: Wrong, pair: tuple[str, str], key: str, routes: Sequence[str]
           ) -> tuple[str, dict] | None:
    """Why a cell fails because one of ``routes`` computed a wrong result there, and the
    routes as a Cell's ``numbers``; None where none did."""
    found = wrong.get((*pair, key), {})
    bad = [r for r in found if r in routes]
    if not bad:
        return None
    return (f"wrong: {' and '.join(bad)} computed a wrong result or failed to run (pass "
            f"{min(found[r] for r in bad)}; its check is in the archive)",
            {"wrong_routes": " ".join(bad)})


def _no_verdict_reason(effect: dict, where: str = "") -> str:
    orders = effect.get("unstable_orders") or []
    said = f" (orders {'; '.join(orders)} kept failing)" if orders else ""
    return f"{effect['verdict']}{where}{said}: no verdict"


def regressions(summary: dict, tolerance: float, wrong: Wrong) -> list[Cell]:
    """Every cell of one run under the regression rule (``wrong``: the run's wrong routes)."""
    cells = []
    for comp in summary["comparisons"]:
        pair = (comp["baseline"], comp["candidate"])
        for c in comp["cases"]:
            e, t = c["effect"], c.get("time_us", {})
            result, reason = decide(e["verdict"], e["best"], tolerance, e["width"])
            bad = _wrong(wrong, pair, c["key"], [comp["candidate"]]) \
                if result == UNDECIDED else None
            if bad:
                result, reason = WRONG, bad[0]
            elif result == UNDECIDED:
                reason = _no_verdict_reason(e)
            cells.append(Cell(
                _name(comp), c["key"], c["geometry"], c["tokens"], e["verdict"], result, reason,
                e["estimate"], e["best"], e["worst"], e["width"], e["coverage"],
                {"kept": e["kept"], "total": e["total"], "median": e["median"],
                 "width_median": e["width_median"], "baseline_us": t.get("baseline"),
                 "candidate_us": t.get("candidate"), **(bad[1] if bad else {})}))
    return cells


# -- across two runs -------------------------------------------------------------------------


def identity(archive: dict) -> dict[str, object]:
    """What two archives must share to be compared: protocol text, the cells picked from it,
    device, routes, the timing settings that shape a sample (``measuring_timing``) and the
    launch state their arms were timed in (which moves a route beside a PDL one by 9-12 % on
    the H200; an archive from before the setting ran as found)."""
    env, resolved = archive["environment"], archive["protocol"]["resolved"]
    return {"protocol sha256": archive["protocol"]["sha256"],
            "tokens": list(resolved["tokens"]),
            "geometries": [g["name"] for g in resolved["geometries"]],
            "device": (env.get("gpu") or {}).get("name") or archive["settings"]["device"],
            "routes": list(resolved["routes"]),
            **measuring_timing(archive),
            "launch state": launch_state_of(archive)}


def mismatches(baseline: dict, candidate: dict) -> list[str]:
    """How two archives' identities differ, one phrase per difference."""
    a, b = identity(baseline), identity(candidate)
    return [f"{key}: {a[key]} in --baseline, {b[key]} in --candidate"
            for key in a if a[key] != b[key]]


def _across_cell(pair: tuple[str, str], a: dict | None, b: dict | None, tolerance: float,
                 absolute: bool, wrong_b: Wrong) -> Cell:
    group = f"{pair[0]} -> {pair[1]}"
    some = b or a
    where = (some["key"], some["geometry"], some["tokens"])
    if a is None or b is None:
        missing = "--baseline" if a is None else "--candidate"
        return Cell(group, *where, "unmeasured", UNDECIDED,
                    f"unmeasured: not in the {missing} archive: no verdict")
    ea, eb = a["effect"], b["effect"]
    if NOT_SUPPORTED in (ea["verdict"], eb["verdict"]):
        return Cell(group, *where, NOT_SUPPORTED, SKIPPED, "not supported by one of its routes")
    bad = _wrong(wrong_b, pair, b["key"], [pair[1]])
    if bad:
        return Cell(group, *where, eb["verdict"], WRONG, bad[0] + " in the --candidate run",
                    numbers=bad[1])
    for run, e in (("--baseline", ea), ("--candidate", eb)):
        if e["estimate"] is None:
            return Cell(group, *where, e["verdict"], UNDECIDED,
                        _no_verdict_reason(e, f" in the {run} run"))
    if absolute:
        ta = [r["candidate_s"] for r in used_rows(a)]
        tb = [r["candidate_s"] for r in used_rows(b)]
        estimate = median(tb) / median(ta) - 1
        lo, hi = min(tb) / max(ta) - 1, max(tb) / min(ta) - 1
    else:
        estimate = (1 + eb["estimate"]) / (1 + ea["estimate"]) - 1
        lo = (1 + eb["best"]) / (1 + ea["worst"]) - 1
        hi = (1 + eb["worst"]) / (1 + ea["best"]) - 1
    width = ea["width"] + eb["width"]
    verdict = "slower" if lo > width else "faster" if hi < -width else "unresolved"
    result, reason = decide(verdict, lo, tolerance, width)
    ta_us, tb_us = a.get("time_us", {}), b.get("time_us", {})
    return Cell(group, *where, verdict, result, reason, estimate, lo, hi, width,
                max(0.0, ea["coverage"] + eb["coverage"] - 1),
                {"baseline_run_delta": ea["estimate"], "candidate_run_delta": eb["estimate"],
                 "baseline_run_width": ea["width"], "candidate_run_width": eb["width"],
                 "baseline_run_candidate_us": ta_us.get("candidate"),
                 "candidate_run_candidate_us": tb_us.get("candidate")})


def across(baseline: dict, candidate: dict, tolerance: float, wrong_candidate: Wrong,
           absolute: bool = False) -> list[Cell]:
    """Every cell of two runs' summaries compared (see the module docstring); a cell found
    in one run only is inconclusive, one whose candidate route computed a wrong result in
    the candidate run (``wrong_candidate``) fails."""
    comps_a = {(c["baseline"], c["candidate"]): c for c in baseline["comparisons"]}
    comps_b = {(c["baseline"], c["candidate"]): c for c in candidate["comparisons"]}
    cells = []
    for pair in [*comps_b, *(p for p in comps_a if p not in comps_b)]:
        a = {c["key"]: c for c in comps_a.get(pair, {"cases": []})["cases"]}
        b = {c["key"]: c for c in comps_b.get(pair, {"cases": []})["cases"]}
        for key in [*b, *(k for k in a if k not in b)]:
            cells.append(_across_cell(pair, a.get(key), b.get(key), tolerance, absolute,
                                      wrong_candidate))
    return cells


# -- expectations ----------------------------------------------------------------------------

GRAMMAR = ("ROUTE faster|slower than ROUTE SCOPE, where SCOPE is 'in all', 'in band NAME' "
           "or 'at T OP N' (OP one of <= < >= > =)")
_EXPECT = re.compile(r"\s*(?P<route>\S+)\s+(?P<rel>faster|slower)\s+than\s+(?P<other>\S+)\s+"
                     r"(?:(?P<all>in\s+all)|in\s+band\s+(?P<band>\S.*?)"
                     r"|at\s+T\s*(?P<op><=|>=|==|<|>|=)\s*(?P<n>\d+))\s*")
_OPS = {"<=": lambda t, n: t <= n, "<": lambda t, n: t < n, ">=": lambda t, n: t >= n,
        ">": lambda t, n: t > n, "=": lambda t, n: t == n, "==": lambda t, n: t == n}


@dataclass(frozen=True)
class Expectation:
    """``fused faster than split in band decode``: a claim about one run's verdicts."""

    text: str
    route: str
    relation: str  # faster or slower
    other: str
    band: str | None = None  # in band NAME
    op: str | None = None  # at T OP N
    tokens: int | None = None

    def selects(self, cell: dict, bands: dict[str, dict]) -> bool:
        if self.band is not None:
            b = bands[self.band]
            return ((b.get("tokens_min") is None or cell["tokens"] >= b["tokens_min"])
                    and (b.get("tokens_max") is None or cell["tokens"] <= b["tokens_max"])
                    and (b.get("geometries") is None or cell["geometry"] in b["geometries"]))
        if self.op is not None:
            return _OPS[self.op](cell["tokens"], self.tokens)
        return True


def parse_expectation(text: str) -> Expectation:
    """Parse ``ROUTE faster|slower than ROUTE SCOPE``; SCOPE is ``in all``, ``in band NAME``
    (the rest of the sentence, quotes optional) or ``at T OP N`` with OP one of
    ``<= < >= > =``. Anything else is a ``GateError`` quoting the grammar."""
    m = _EXPECT.fullmatch(text)
    if m is None:
        raise GateError(f"--expect {text!r}: not an expectation; write {GRAMMAR}, e.g. "
                        "'fused faster than split in all'")
    if m["route"] == m["other"]:
        raise GateError(f"--expect {text!r}: a route cannot be compared with itself")
    band = m["band"].strip().strip("'\"") if m["band"] else None
    return Expectation(text.strip(), m["route"], m["rel"], m["other"], band, m["op"],
                       int(m["n"]) if m["n"] else None)


def expect(summary: dict, bands: Sequence[dict], expectation: Expectation, wrong: Wrong,
           picked: str | None = None) -> list[Cell]:
    """The cells an expectation selects, each met, not met (a route of it wrong there too:
    ``wrong``) or inconclusive. A missing
    comparison or band, or a scope that selects no cell, is a ``GateError`` (which names
    ``picked``, the cells the run picked from its protocol, where it did)."""
    x = expectation
    pick = f"; the run picked {picked}" if picked else ""
    comps = {(c["baseline"], c["candidate"]): c for c in summary["comparisons"]}
    opposite = {"faster": "slower", "slower": "faster"}
    if (x.other, x.route) in comps:
        comp, want = comps[x.other, x.route], x.relation
    elif (x.route, x.other) in comps:
        comp, want = comps[x.route, x.other], opposite[x.relation]
    else:
        raise GateError(f"--expect {x.text!r}: the archive compares no {x.route} with "
                        f"{x.other} (it has {', '.join(map(_name, comps.values())) or 'none'})")
    by_name = {b["name"]: b for b in bands}
    if x.band is not None and x.band not in by_name:
        raise GateError(f"--expect {x.text!r}: no band {x.band!r} in the archive's protocol "
                        f"(it has {', '.join(repr(n) for n in by_name) or 'none'}){pick}")
    selected = [c for c in comp["cases"] if x.selects(c, by_name)]
    if not selected:
        raise GateError(f"--expect {x.text!r}: selects no case of {_name(comp)}{pick}")
    if all(c["effect"]["verdict"] == NOT_SUPPORTED for c in selected):
        raise GateError(f"--expect {x.text!r}: every case it selects of {_name(comp)} is "
                        f"{NOT_SUPPORTED} (not supported by one of its routes)")
    cells = []
    for c in selected:
        e = c["effect"]
        pair = (comp["baseline"], comp["candidate"])
        verdict, bad = e["verdict"], _wrong(wrong, pair, c["key"], pair)
        if bad:
            result, reason = WRONG, bad[0]
        elif verdict == want:
            result, reason = MET, f"{_name(comp)}: {verdict}"
        elif verdict == NOT_SUPPORTED:
            result, reason = SKIPPED, "not supported by one of its routes"
        elif verdict not in RESOLVED:
            result, reason = UNDECIDED, _no_verdict_reason(e)
        else:
            result, reason = NOT_MET, f"{_name(comp)}: {verdict}, not {want}"
        cells.append(Cell(x.text, c["key"], c["geometry"], c["tokens"], verdict, result,
                          reason, e["estimate"], e["best"], e["worst"], e["width"],
                          e["coverage"], {"comparison": _name(comp), "wanted": want,
                                          **(bad[1] if bad else {})}))
    return cells


# -- the outcome -----------------------------------------------------------------------------

NAMED = 5  # cases named in the summary line before "and N more"


def _wrong_routes_of(cell: Cell) -> str:
    return f"wrong: {cell.numbers['wrong_routes']}"


@dataclass
class Outcome:
    """A gate's cells and what they add up to: the exit code and the one-line summary."""

    kind: str  # "regressions" or "expectations"
    cells: list[Cell]
    tolerance: float | None = None
    max_inconclusive: int = 0
    notes: list[str] = field(default_factory=list)  # the run's, said before the summary

    @property
    def said(self) -> list[str]:
        """What is said before the summary line: ``notes``, then how many passing cases an
        instrument wider than the tolerance could not judge at it."""
        blind = [c for c in self.cells if c.result == OK and self.tolerance is not None
                 and c.width is not None and c.width > self.tolerance]
        if not blind:
            return self.notes
        widest = max(blind, key=lambda c: c.width)
        return [*self.notes,
                f"the instrument was wider than the {pct(self.tolerance, False)} tolerance at "
                f"{len(blind)} of {len(self.judged)} judged cases (widest "
                f"{pct(widest.width, False)} at {self.label(widest)}): a regression between the "
                "tolerance and the width passes there unseen; a quieter machine or more "
                "passes narrow it"]

    @property
    def failed(self) -> list[Cell]:
        return [c for c in self.cells if c.result in FAILING]

    @property
    def inconclusive(self) -> list[Cell]:
        return [c for c in self.cells if c.result == UNDECIDED]

    @property
    def counted(self) -> list[Cell]:
        return [c for c in self.cells if c.result != SKIPPED]

    @property
    def judged(self) -> list[Cell]:
        return [c for c in self.counted if c.result != UNDECIDED]

    @property
    def exit_code(self) -> int:
        if self.failed:
            return FAIL
        # A gate that judged no case has passed nothing, however many it may leave undecided.
        if not self.judged or len(self.inconclusive) > self.max_inconclusive:
            return INCONCLUSIVE
        return PASS

    def label(self, cell: Cell) -> str:
        """A cell's name in sentences: its case, and its group where there are several."""
        many = len({c.group for c in self.cells}) > 1 and self.kind == "regressions"
        return f"{cell.group}: {cell.label}" if many else cell.label

    def _names(self, cells: list[Cell], what) -> str:
        shown = ", ".join(f"{self.label(c)} {what(c)}" for c in cells[:NAMED])
        more = len(cells) - NAMED
        return shown + (f" and {more} more (in the table)" if more > 0 else "")

    def summary(self) -> str:
        word = {PASS: "PASS", FAIL: "FAIL", INCONCLUSIVE: "INCONCLUSIVE"}[self.exit_code]
        wrong = [c for c in self.cells if c.result == WRONG]
        if self.kind == "regressions":
            failed = sorted((c for c in self.failed if c.result == REGRESSED),
                            key=lambda c: -c.estimate)
            line = f"gate: {word}, "
            if wrong:
                line += (f"{len(wrong)} of {len(self.counted)} cases wrong ("
                         + self._names(wrong, _wrong_routes_of) + "); ")
            line += (f"{len(failed)} of {len(self.counted)} cases regressed beyond the "
                     f"{pct(self.tolerance, False)} tolerance")
            if failed:
                line += (f" (worst {pct(failed[0].estimate)} at {self.label(failed[0])}): "
                         + self._names(failed, lambda c: pct(c.estimate)))
        else:
            parts = []
            for text in dict.fromkeys(c.group for c in self.cells):
                mine = [c for c in self.cells if c.group == text and c.result != SKIPPED]
                missed = [c for c in mine if c.result in FAILING]
                if missed:
                    parts.append(f'"{text}" not met in {len(missed)} of {len(mine)} cases: '
                                 + self._names(missed, lambda c: _wrong_routes_of(c)
                                               if c.result == WRONG else c.verdict))
                else:
                    met = sum(c.result == MET for c in mine)
                    parts.append(f'"{text}" met in {met} of {len(mine)} cases')
            line = f"gate: {word}, " + "; ".join(parts)
        if not self.judged:
            line += "; no case was judged"
        undecided = self.inconclusive
        if undecided:
            allowed = "more than" if len(undecided) > self.max_inconclusive else "within"
            line += (f"; {len(undecided)} inconclusive, {allowed} --max-inconclusive "
                     f"{self.max_inconclusive}: " + self._names(undecided, lambda c: c.verdict))
        return line
