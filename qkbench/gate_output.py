"""What a gate shows: its table (rich or Markdown) and a JUnit XML report. Nothing prints.

One row / test case per (comparison, case) cell, in the order the gate decided them; the
one-line summary (``Outcome.summary``) always comes last.
"""

import re
import xml.etree.ElementTree as ET

from rich.console import Group
from rich.table import Table
from rich.text import Text

from qkbench.gate import FAILING, REGRESSED, SKIPPED, UNDECIDED, WRONG, Cell, Outcome, pct
from qkbench.report import md_cell, md_row

RESULT_STYLE = {REGRESSED: "bold red", "not met": "bold red", WRONG: "bold red",
                UNDECIDED: "yellow"}
RESULT_WORD = {REGRESSED: "REGRESSED", "not met": "NOT MET", WRONG: "WRONG",
               UNDECIDED: "inconclusive"}


def headers(outcome: Outcome) -> list[str]:
    group = "comparison" if outcome.kind == "regressions" else "expectation"
    return [group, "geometry", "T", "delta", "interval", "width", "verdict", "gate", "why"]


def _interval(c: Cell, digits: int = 1) -> str:
    return "-" if c.lo is None else f"[{pct(c.lo, True, digits)}, {pct(c.hi, True, digits)}]"


def rows(outcome: Outcome) -> list[list[str]]:
    """The table's rows: figures to two decimals (widths are often a tenth of a per cent)."""
    return [[c.group, c.geometry, str(c.tokens), pct(c.estimate, True, 2), _interval(c, 2),
             pct(c.width, False, 2), c.verdict, RESULT_WORD.get(c.result, c.result), c.reason]
            for c in outcome.cells]


def title(outcome: Outcome, measure: str) -> str:
    tolerance = ("" if outcome.tolerance is None else
                 f"; a case regresses when it is slower and its whole interval lies beyond "
                 f"+{pct(outcome.tolerance, False)}")
    return f"qkbench gate: {measure}{tolerance}"


def as_rich(outcome: Outcome, measure: str) -> Group:
    """The table, the notes, and the summary line last."""
    # Text, not markup: "[best, worst]" and route names are never read as rich tags.
    table = Table(title=Text(title(outcome, measure)), title_justify="left")
    for i, h in enumerate(headers(outcome)):
        table.add_column(h, justify="right" if 2 <= i <= 5 else "left")
    for cell, row in zip(outcome.cells, rows(outcome), strict=True):
        table.add_row(*map(Text, row), style=RESULT_STYLE.get(cell.result))
    style = {0: "green", 1: "bold red", 3: "yellow"}[outcome.exit_code]
    return Group(table, *(Text(n) for n in outcome.said),
                 Text(outcome.summary(), style=style))


def as_markdown(outcome: Outcome, measure: str) -> str:
    """A PR comment or a CI job summary ($GITHUB_STEP_SUMMARY): the verdict first as a
    heading, the table, the notes, and the summary line last."""
    word = outcome.summary().split(",")[0].removeprefix("gate: ")
    out = [f"### qkbench gate: {word}", "", f"_{md_cell(title(outcome, measure))}_", "",
           md_row(headers(outcome)),
           "|" + "|".join("---" for _ in headers(outcome)) + "|"]
    for cell, row in zip(outcome.cells, rows(outcome), strict=True):
        out.append(md_row(row, bold={7} if cell.result in (*FAILING, UNDECIDED) else ()))
    out += [""] + [f"- {md_cell(n)}" for n in outcome.said]
    out += ["", f"**{md_cell(outcome.summary())}**"]
    return "\n".join(out) + "\n"


def _value(x) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x)
    return str(x)


def _test_class(group: str) -> str:
    """A test case's class: its group without the ref's sha (``fused@1a2b3c4d5e6f -> fused``
    is ``fused@ref -> fused``), so that a CI's test history follows one cell across base
    commits."""
    return re.sub(r"@[0-9a-f]{12}\b", "@ref", group)


def junit(outcome: Outcome) -> bytes:
    """JUnit XML: a ``<testsuite>`` per comparison (or expectation), a ``<testcase>`` per
    cell with ``<properties>`` holding its numbers (ratios as shares: 0.071 is +7.1 %), a
    ``<failure>`` for a regression or an unmet expectation, ``<skipped>`` for an
    inconclusive or n/s cell."""
    def counts(cells: list[Cell]) -> dict[str, str]:
        return {"tests": str(len(cells)),
                "failures": str(sum(c.result in FAILING for c in cells)),
                "errors": "0",
                "skipped": str(sum(c.result in (UNDECIDED, SKIPPED) for c in cells))}

    root = ET.Element("testsuites", name="qkbench gate", **counts(outcome.cells))
    for group in dict.fromkeys(c.group for c in outcome.cells):
        cells = [c for c in outcome.cells if c.group == group]
        suite = ET.SubElement(root, "testsuite", name=group, **counts(cells))
        for c in cells:
            case = ET.SubElement(suite, "testcase", classname=_test_class(group), name=c.key,
                                 time="0")
            props = ET.SubElement(case, "properties")
            figures = {"verdict": c.verdict, "gate": c.result, "delta": c.estimate,
                       "interval_low": c.lo, "interval_high": c.hi, "width": c.width,
                       "coverage": c.coverage, "tolerance": outcome.tolerance, **c.numbers}
            for key, value in figures.items():
                ET.SubElement(props, "property", name=key, value=_value(value))
            message = f"{outcome.label(c)}: {pct(c.estimate)} {_interval(c)}: {c.reason}"
            if c.result in FAILING:
                ET.SubElement(case, "failure", message=message, type=c.result).text = message
            elif c.result in (UNDECIDED, SKIPPED):
                ET.SubElement(case, "skipped", message=f"{c.result}: {c.reason}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def error_junit(message: str) -> bytes:
    """The JUnit report of a gate that could not run (exit 2): one test case in error, so
    that a CI page shows why, not an earlier run's report left in its place."""
    counts = {"tests": "1", "failures": "0", "errors": "1", "skipped": "0"}
    root = ET.Element("testsuites", name="qkbench gate", **counts)
    suite = ET.SubElement(root, "testsuite", name="qkbench gate", **counts)
    case = ET.SubElement(suite, "testcase", classname="qkbench gate", name="gate", time="0")
    ET.SubElement(case, "error", message=message, type="usage").text = message
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def error_markdown(message: str) -> str:
    """The Markdown of a gate that could not run: its heading and the error line."""
    return f"### qkbench gate: ERROR\n\n**{md_cell(message)}**\n"
