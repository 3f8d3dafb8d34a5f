"""Picking a protocol's cells: --tokens replaces its token counts, --geometry keeps only the
named geometries; the archive, its audit, resume, report and the gate all follow."""

import json

import pytest
from typer.testing import CliRunner

from qkbench.archive import read
from qkbench.cli import app
from qkbench.errors import ProtocolError
from qkbench.protocol import parse, rebuild, selection

from conftest import interpreter_only

TWO = """
name = "two"
routes = ["split", "fused"]
tokens = [1, 4]
max_position = 64

[timing]
passes = 6
warmup = 0
samples = 3
inner_reps = 1
isolation = "inprocess"
drop_threshold = 0.99

[[geometry]]
name = "a"
heads_q = 2
heads_k = 1
head_dim = 64

[[geometry]]
name = "b"
heads_q = 4
heads_k = 2
head_dim = 64

[[band]]
name = "only a"
geometries = ["a"]

[[band]]
name = "both"
geometries = ["a", "b"]

[[band]]
name = "every geometry"
tokens_min = 2
"""


def test_tokens_replace_the_protocols_token_counts():
    p = parse(TWO).with_overrides(tokens=[2, 8])
    assert [c.key for c in p.cases()] == ["a/T2", "a/T8", "b/T2", "b/T8"]


def test_geometries_keep_the_named_ones_in_the_protocols_order():
    p = parse(TWO).with_overrides(geometries=["b", "a"])
    assert [g.name for g in p.geometries] == ["a", "b"]
    assert [c.key for c in parse(TWO).with_overrides(geometries=["b"]).cases()] == ["b/T1",
                                                                                   "b/T4"]


def test_bands_lose_the_geometries_left_out_and_a_band_of_only_those_goes():
    bands = parse(TWO).with_overrides(geometries=["b"]).bands
    assert [(b.name, b.geometries) for b in bands] == [("both", ("b",)),
                                                       ("every geometry", None)]


def test_a_band_that_holds_none_of_the_picked_token_counts_goes():
    bands = parse(TWO).with_overrides(tokens=[1]).bands
    assert [b.name for b in bands] == ["only a", "both"]


EMPTY_BAND = TWO + """
[[band]]
name = "none of its cells"
tokens_min = 4096
"""


def test_a_band_that_holds_no_cell_of_the_protocol_is_refused_at_load():
    with pytest.raises(ProtocolError, match=r"band\[3\] \('none of its cells'\) holds no cell "
                                            r"of the protocol's \(tokens \[1, 4\]"):
        parse(EMPTY_BAND)


def test_the_protocols_own_token_counts_in_another_order_are_no_pick():
    again = parse(TWO).with_overrides(tokens=[4, 1])
    assert again.tokens == (1, 4) and selection(recorded(again)) is None
    assert parse(TWO).with_overrides(tokens=[8, 4, 2]).tokens == (4, 2, 8)


@pytest.mark.parametrize(("override", "message"), [
    ({"geometries": ["c"]}, "overrides: 'geometries' names no geometry 'c' of protocol 'two' "
                            "\\(it has a, b\\)"),
    ({"geometries": ["a", "a"]}, "overrides: 'geometries' repeat \\['a'\\]"),
    ({"tokens": [0]}, "overrides: 'tokens' must be a non-empty array of integers >= 1"),
    ({"tokens": [4, 4]}, "overrides: 'tokens' repeat \\[4\\]"),
    ({"tokens": [2**40]}, "overrides: 'tokens' 1099511627776 on geometry 'a'"),
], ids=["unknown-geometry", "repeated-geometry", "zero-tokens", "repeated-tokens", "too-large"])
def test_a_bad_pick_is_refused_naming_it(override, message):
    with pytest.raises(ProtocolError, match=message):
        parse(TWO).with_overrides(**override)


def recorded(protocol) -> dict:
    """The ``protocol`` object an archive of ``protocol`` records, as read back."""
    return json.loads(json.dumps(protocol.record()))


def test_an_archives_header_rebuilds_the_picked_cells():
    picked = parse(TWO).with_overrides(tokens=[2], geometries=["b"])
    assert rebuild(recorded(picked)).resolved() == picked.resolved()


def test_the_pick_is_said_in_words_and_nothing_is_said_without_one():
    picked = parse(TWO).with_overrides(tokens=[2], geometries=["b"])
    assert selection(recorded(picked)) == ("tokens 2 (the protocol's: 1, 4); geometries b "
                                           "(of a, b)")
    assert selection(recorded(parse(TWO))) is None


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def picked_sweep(tmp_path_factory):
    """``two`` swept on the CPU with one token count and one geometry picked."""
    folder = tmp_path_factory.mktemp("cells")
    (folder / "two.toml").write_text(TWO)
    out = folder / "run.json"
    args = ("--protocol", str(folder / "two.toml"), "--device", "cpu")
    result = invoke("sweep", *args, "--tokens", "2", "--geometry", "b", "--out", str(out))
    return args, out, result


@interpreter_only
def test_a_picked_sweep_measures_only_the_picked_cells_and_says_so(picked_sweep):
    _, out, result = picked_sweep
    assert result.exit_code == 0, result.output
    run = read(out)
    assert {c["key"] for p in run["passes"] for c in p["cases"]} == {"b/T2"}
    assert ("cells picked: tokens 2 (the protocol's: 1, 4); geometries b (of a, b)"
            in result.stdout)
    printed = json.loads(invoke("report", str(out), "--format", "json").stdout)
    assert printed["header"]["protocol"]["cells_picked"] == ("tokens 2 (the protocol's: 1, "
                                                             "4); geometries b (of a, b)")


@interpreter_only
def test_a_picked_sweep_passes_its_audit(picked_sweep):
    _, out, _ = picked_sweep
    audited = invoke("audit", str(out))
    assert audited.exit_code == 0 and audited.stdout.startswith("audit ok:"), audited.output


def refused_resume(picked_sweep, tokens: str, geometry: str) -> str:
    """The stderr of a resume of the picked sweep asking for other cells (exit 1)."""
    args, out, _ = picked_sweep
    result = invoke("sweep", *args, "--tokens", tokens, "--geometry", geometry, "--resume",
                    "--out", str(out))
    assert result.exit_code == 1
    return result.stderr


@interpreter_only
def test_a_resume_with_other_cells_is_refused_naming_the_tokens(picked_sweep):
    assert "cannot resume: its settings differ from these overrides (tokens is [2] there, " \
           "[4] here)" in refused_resume(picked_sweep, "4", "b")


@interpreter_only
def test_a_resume_with_other_geometries_is_refused_naming_them_not_their_tables(picked_sweep):
    said = refused_resume(picked_sweep, "2", "a")
    assert "geometries (names) is ['b'] there, ['a'] here" in said and "{" not in said


@interpreter_only
def test_an_expectation_on_a_band_the_pick_left_out_says_what_was_picked(picked_sweep):
    _, out, _ = picked_sweep
    result = invoke("gate", str(out), "--expect", "fused faster than split in band 'only a'")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --expect \"fused faster than split in band 'only a'\": no band 'only a' in "
        "the archive's protocol (it has 'both', 'every geometry'); the run picked tokens 2 "
        "(the protocol's: 1, 4); geometries b (of a, b)")


@interpreter_only
def test_the_gate_refuses_archives_of_different_cells_naming_them(picked_sweep, tmp_path):
    args, out, _ = picked_sweep
    other = tmp_path / "other.json"
    done = invoke("sweep", *args, "--tokens", "1", "--geometry", "b", "--out", str(other))
    assert done.exit_code == 0, done.output
    result = invoke("gate", "--baseline", str(out), "--candidate", str(other))
    assert result.exit_code == 2
    assert "tokens: [2] in --baseline, [1] in --candidate" in result.stderr


@interpreter_only
def test_verify_checks_only_the_picked_cells(tmp_path):
    (tmp_path / "two.toml").write_text(TWO)
    result = invoke("verify", "--protocol", str(tmp_path / "two.toml"), "--device", "cpu",
                    "--tokens", "3", "--geometry", "a")
    assert result.exit_code == 0, result.output
    assert [line.split(":")[0] for line in result.stdout.strip().splitlines()] == ["a/T3"]
    assert result.stderr.startswith("verify two on cpu: 1 case(s) (tokens 3 (the protocol's: "
                                    "1, 4); geometries a (of a, b)), routes split, fused")


def test_an_unknown_geometry_fails_in_one_line_before_anything_runs(tmp_path):
    (tmp_path / "two.toml").write_text(TWO)
    result = invoke("sweep", "--protocol", str(tmp_path / "two.toml"), "--device", "cpu",
                    "--geometry", "c", "--out", str(tmp_path / "run.json"))
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "error: --geometry names no geometry 'c' of protocol 'two' (it has a, b)"]
    assert not (tmp_path / "run.json").exists()


def test_a_band_naming_a_geometry_twice_is_refused():
    with pytest.raises(ProtocolError, match=r"band\[3\] \('twice'\): 'geometries' repeat: "
                                            r"\['a', 'a'\]"):
        parse(TWO + '\n[[band]]\nname = "twice"\ngeometries = ["a", "a"]\n')
