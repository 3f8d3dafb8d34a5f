"""What a reader sees: tables that never cut a name or a number at 80 or 120 columns, and
the plots (PNGs written, readable, not blank, one per expected picture)."""

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from qkbench import archive as archives
from qkbench import report
from qkbench.cli import app
from qkbench.summary import current

from helpers import reseal
from synthetic import synthetic_sweep, tiny_protocol

H200 = Path(__file__).parent.parent / "results" / "h200"
# Unstable cells with long verdicts (text-decode), five-digit widths (prefill).
ARCHIVES = ["2026-12-03-text-decode.json", "2026-12-03-prefill.json"]
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?%?")


@pytest.fixture(scope="module", params=ARCHIVES, ids=["text-decode", "prefill"])
def h200(request) -> dict:
    return archives.read(H200 / request.param)


def render(archive: dict, width: int, wide: bool) -> str:
    console = Console(width=width, file=StringIO(), color_system=None)
    console.print(report.as_rich(archive, wide=wide))
    return console.file.getvalue()


def cell_values(archive: dict, wide: bool) -> set[str]:
    """Every name and number the per-cell table shows."""
    (cells, *_) = report.tables(archive)
    columns = range(len(cells.headers)) if wide else cells.compact
    return {word for row in cells.rows for i in columns for word in row[i].split()
            if i in (0, 1) or NUMBER.search(word)}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("wide", [False, True], ids=["compact", "wide"])
def test_tables_keep_every_geometry_name_and_number_whole(h200, width, wide):
    text = render(h200, width, wide)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    words = set(re.split(r"[\s│┃]+", text))
    names = {c["geometry"] for comp in current(h200)["comparisons"] for c in comp["cases"]}
    assert names <= words
    # Every value of the per-cell table is printed whole (an interval may wrap at its
    # space, so its two ends are checked as words).
    assert cell_values(h200, wide) <= words


def test_the_compact_table_fits_100_columns_with_its_eight_columns(h200):
    # The width beside the interval: the verdict is read from the two.
    (cells, *_) = report.tables(h200)
    assert [cells.headers[i] for i in cells.compact] == [
        "geometry", "T", "split us", "fused us", "delta", cells.headers[7], "width", "verdict"]
    lines = render(h200, 100, wide=False).splitlines()
    header = next(line for line in lines if line.lstrip().startswith("geometry"))
    assert "split us" in header and "96.88% interval" in header


def test_wide_shows_every_column_and_compact_does_not(h200):
    assert "share of" not in render(h200, 200, wide=False)
    wide = render(h200, 300, wide=True)
    assert "split share of copy BW" in wide and "fused share of copy BW" in wide


def test_wide_shows_each_route_on_its_own_bytes(h200):
    """The baseline's share is its rate on its own byte model (the split route's three
    launches move more bytes than the fused one), not the candidate's bytes over its time."""
    (cells, *_) = report.tables(h200)
    comp = current(h200)["comparisons"][0]
    split = cells.headers.index("split share of copy BW")
    fused = cells.headers.index("fused share of copy BW")
    measured = 0
    for row, case in zip(cells.rows, comp["cases"], strict=True):
        if "bandwidth" not in case:  # an unstable cell has no times
            assert row[split] == row[fused] == "-"
            continue
        measured += 1
        bw = case["bandwidth"]
        assert row[split] == report._pct(bw["baseline"]["share_of_copy"], False)
        assert row[fused] == report._pct(bw["candidate"]["share_of_copy"], False)
        # Its own bytes: split's rate per its time is above what fused's bytes would give.
        assert (bw["baseline"]["share_of_copy"]
                > bw["candidate"]["share_of_copy"] * case["time_us"]["candidate"]
                / case["time_us"]["baseline"])
    assert measured


def test_each_cell_shows_its_median_delta_and_median_null_beside_estimate_and_width(h200):
    # SPEC 4: reported per case, the estimate and the median, best and worst delta; the
    # width and its median.
    (cells, *_) = report.tables(h200)
    comp = current(h200)["comparisons"][0]
    column = {name: cells.headers.index(name) for name in ("median", "width median")}
    shown = 0
    for row, case in zip(cells.rows, comp["cases"], strict=True):
        e = case["effect"]
        assert row[column["median"]] == report._pct(e["median"])
        assert row[column["width median"]] == report._pct(e["width_median"], False)
        shown += e["median"] is not None and e["median"] != e["estimate"]
    assert shown


def test_markdown_keeps_every_column(h200):
    (cells, *_) = report.tables(h200)
    assert "| " + " | ".join(cells.headers) + " |" in report.as_markdown(h200)


def test_a_key_with_spaces_too_long_for_the_terminal_wraps_leaving_room_beside_it():
    name = "a geometry named at length " * 3
    table = report.Table("t", ["geometry", "T", "us", "delta"],
                         [[name.strip(), "32768", "33534.43", "-0.71%"]], keys=2)
    console = Console(width=60, file=StringIO(), color_system=None)
    console.print(report.Fitted(table))
    shown = console.file.getvalue()
    assert all(number in shown for number in ("32768", "33534.43", "-0.71%")), shown
    assert all(word in shown.split() for word in name.split())


def test_a_name_holding_a_pipe_stays_one_markdown_cell(monkeypatch, h200):
    table = report.Table("t", ["geometry", "T", "us"], [["a|b | c", "8", "1.25"]])
    monkeypatch.setattr(report, "tables", lambda archive: [table])
    row = next(line for line in report.as_markdown(h200).splitlines()
               if line.startswith("| a"))
    assert [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]] == [
        "a\\|b \\| c", "8", "1.25"]


@pytest.mark.parametrize(("name", "escaped"), [
    ("a *b* c", "a \\*b\\* c"), ("x_y", "x_y"), ("[l](u)", "\\[l\\](u)"),
    ("<b>", "\\<b>"), ("`c`", "\\`c\\`"), ("a\\b", "a\\\\b")])
def test_a_name_holding_markdown_syntax_reads_as_written(monkeypatch, h200, name, escaped):
    table = report.Table("t", ["geometry", "T", "us"], [[name, "8", "1.25"]])
    monkeypatch.setattr(report, "tables", lambda archive: [table])
    assert f"| {escaped} | 8 | 1.25 |" in report.as_markdown(h200).splitlines()


def test_a_table_too_wide_for_the_terminal_is_shown_in_parts_repeating_its_keys():
    table = report.Table("t", ["geometry", "T", *(f"column {i}" for i in range(8))],
                         [["a-rather-long-geometry-name", "32768",
                           *(f"{1000 + i}.25" for i in range(8))]], keys=2)
    parts = report.Fitted(table, list(range(10))).render(60)
    assert len(parts) > 1
    text = Console(width=60, file=StringIO()).file
    console = Console(width=60, file=text, color_system=None)
    for part in parts:
        console.print(part)
    out = text.getvalue()
    assert out.count("a-rather-long-geometry-name") == len(parts)
    assert all(f"{1000 + i}.25" in out for i in range(8))
    assert "…" not in out


# -- plots ------------------------------------------------------------------------------


def assert_pictures(paths: list[Path], expected: list[str]) -> None:
    """Each PNG exists under its expected name, opens, is of a sensible size and is not
    blank (many distinct colours, not one background)."""
    import matplotlib.image

    assert [p.name for p in paths] == expected
    for path in paths:
        assert path.stat().st_size > 10_000
        pixels = matplotlib.image.imread(path)
        height, width = pixels.shape[:2]
        assert width >= 600 and height >= 400
        rgb = (pixels[..., :3] * 255).astype(int).reshape(-1, 3)
        colours = {tuple(c) for c in rgb[:: max(1, len(rgb) // 20000)]}
        assert len(colours) > 20, f"{path.name} looks blank"
        assert (rgb < 250).any(axis=1).mean() > 0.02


def test_report_plot_writes_three_pictures_per_comparison(tmp_path):
    source = H200 / "2026-12-03-text-decode.json"
    result = CliRunner().invoke(app, ["report", str(source), "--plot", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    stem = "2026-12-03-text-decode-split-vs-fused"
    expected = [f"{stem}-{kind}.png" for kind in ("delta", "time", "bandwidth")]
    paths = [tmp_path / "p" / name for name in expected]
    assert result.stderr.splitlines() == [f"plot: {p}" for p in paths]
    assert_pictures(paths, expected)


def test_the_delta_plot_draws_as_kept_only_the_passes_that_fill_a_cells_slots():
    # In this run a replacement pass measured cells again that their first kept attempts
    # had already filled: 30 such cells, e.g. qwen3-16x2 at T = 8192.
    from qkbench import plots

    archive = archives.read(H200 / "2026-12-03-issue11" / "prefill.json.gz")
    comp = current(archive)["comparisons"][0]
    fig = plots._delta_figure(archive, comp, {})
    again = 0
    for ax, cells in zip(fig.axes, plots._by_geometry(comp).values(), strict=False):
        drawn = {c.get_label(): c.get_offsets().tolist() for c in ax.collections}
        want = sorted([c["tokens"], r["delta"] * 100] for c in cells for r in c["passes"]
                      if r["pass"] in {s["used"] for s in c["slots"]})
        got = sorted(drawn["kept pass"])
        assert [t for t, _ in got] == [t for t, _ in want]
        assert [d for _, d in got] == pytest.approx([d for _, d in want])
        again += len(drawn.get("measured again, not in the balanced set", []))
    assert again > 0


@pytest.mark.parametrize(("run", "cache"), [("2026-12-04-v39/prefill-cold.json.gz", "cold"),
                                            ("2026-12-04-v39/prefill.json.gz", "hot")])
def test_the_header_and_the_plots_say_whether_the_l2_was_hot_or_cold(run, cache):
    from qkbench import plots

    archive = archives.read(H200 / run)
    assert f", cache {cache}, launch state " in report.header_lines(archive)[2]
    assert f" · cache {cache} · " in plots._identity(archive)


def test_a_run_dropped_for_throttling_says_so_not_that_its_null_disagreed(tmp_path):
    throttled = {"throttle": ["sw_power_cap"], "throttle_mask": 4}
    run = synthetic_sweep(tiny_protocol(drop_throttled=True, retries=0), tmp_path / "t.json",
                          card=dict.fromkeys(range(64), throttled))
    assert report.no_verdict_line(run) == (
        "no cell got a verdict: all 2 are unstable (in each, a pass order kept no pass within "
        "its retries: the card reported throttling (timing.drop_throttled)), so the run "
        "measured nothing a verdict can be read from")
    assert "dropped 12 of 12 measured (pass, cell) pairs (throttled 12), " in (
        report.comparison_lines(run)[0])


def test_plots_of_a_cpu_run_without_an_l2_or_a_gpu(smoke_archive, tmp_path):
    from qkbench.plots import plot

    paths = plot(smoke_archive, tmp_path)
    comps = current(smoke_archive)["comparisons"]
    expected = [f"smoke-{c['baseline']}-vs-{c['candidate']}-{kind}.png".replace(":", "-")
                for c in comps for kind in ("delta", "time", "bandwidth")]
    assert_pictures(paths, expected)


def test_plot_names_keep_letters_of_any_script_so_two_archives_do_not_collide(
        smoke_archive, tmp_path):
    from qkbench.plots import plot

    first = plot(smoke_archive, tmp_path, prefix="日本語")
    second = plot(smoke_archive, tmp_path, prefix="한국어")
    assert first[0].name.startswith("日本語-split-vs-")
    assert not set(first) & set(second)
    # A prefix of nothing but separators falls back to the protocol's name.
    assert plot(smoke_archive, tmp_path, prefix="!!!")[0].name.startswith("smoke-split-vs-")


def test_plot_of_a_run_with_no_measured_cell_says_so(one_pass, tmp_path):
    run = archives.read(one_pass)
    run["passes"], run["summary"] = [], None
    empty = tmp_path / "empty.json"
    archives.write(empty, reseal(run))
    result = CliRunner().invoke(app, ["report", str(empty), "--plot", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "no plots: no comparison has a measured cell")


def test_plot_into_a_file_fails_in_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(app, ["report", str(H200 / "2026-12-03-dit.json"),
                                      "--plot", str(blocker)])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: --plot {blocker}: is a file; the plots go into a folder (made where missing)"]


def test_report_cli_is_compact_by_default_and_wide_on_request(smoke_sweep):
    path, _ = smoke_sweep
    compact = CliRunner().invoke(app, ["report", str(path)])
    wide = CliRunner().invoke(app, ["report", str(path), "--wide"])
    assert compact.exit_code == wide.exit_code == 0
    assert "fused share of copy BW" not in compact.stdout
    assert "fused share of copy BW" in wide.stdout
    assert "tiny-4x2" in compact.stdout and "tiny-4x2" in wide.stdout


def test_report_says_no_process_writes_a_run_that_stopped(one_pass, tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(one_pass.read_bytes())
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"note: no qkbench is writing {path}: its run stopped "
                                    "before it was complete")


def test_export_says_no_process_writes_a_run_that_stopped(one_pass, tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(one_pass.read_bytes())
    result = CliRunner().invoke(app, ["export", str(path), "--csv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("pass,case,comparison,arm,route,sample,seconds\n0,")
    assert result.stderr.startswith(f"note: no qkbench is writing {path}: its run stopped "
                                    "before it was complete")


def test_report_says_nothing_of_a_stop_while_the_run_holds_its_lock(one_pass, tmp_path):
    from qkbench.lock import ArchiveLock

    path = tmp_path / "run.json"
    path.write_bytes(one_pass.read_bytes())
    with ArchiveLock(path):
        result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 0, result.output
    assert "note:" not in result.stderr


@pytest.mark.parametrize("stored", ["every cell unstable", "none"])
def test_report_and_crossover_never_read_the_stored_summary(smoke_archive, tmp_path, stored):
    edited = json.loads(json.dumps(smoke_archive))
    if stored == "none":
        edited["summary"] = {}
    else:
        for comp in edited["summary"]["comparisons"]:
            for cell in comp["cases"]:
                cell["effect"]["verdict"] = "unstable"
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(edited))
    for command in ("report", "crossover"):
        result = CliRunner().invoke(app, [command, str(path)])
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        assert "no cell got a verdict" not in result.output


def test_report_of_a_run_with_no_finished_pass_says_so(smoke_archive):
    fresh = {**smoke_archive, "status": "running", "passes": [], "summary": None}
    assert "no pass has finished yet: nothing to report" in report.header_lines(fresh)
    assert report.tables(fresh) == []


def test_report_says_a_run_stopped_whose_lock_file_names_only_dead_processes(one_pass,
                                                                            tmp_path):
    from qkbench.lock import lock_path

    path = tmp_path / "run.json"
    path.write_bytes(one_pass.read_bytes())
    lock_path(path).write_text('{"manager": 999999999, "worker": null}')  # a killed run's
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.stderr.startswith(f"note: no qkbench is writing {path}")


def test_the_per_cell_table_shows_the_launch_floor_timed_beside_each_cell(tmp_path):
    from synthetic import REFERENCE_SECONDS, synthetic_sweep, tiny_protocol

    run = synthetic_sweep(tiny_protocol(), tmp_path / "run.json")
    (cells, *_) = report.tables(run)
    column = cells.headers.index("floor us")
    floor_us = f"{REFERENCE_SECONDS['floor'] * 1e6:.2f}"
    assert [row[column] for row in cells.rows] == [floor_us, floor_us]


def test_the_floor_column_of_an_archive_that_timed_none_is_empty(h200):
    (cells, *_) = report.tables(h200)
    column = cells.headers.index("floor us")
    assert {row[column] for row in cells.rows} == {"-"}
