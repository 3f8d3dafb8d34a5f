"""Protocols: every shipped one loads; a bad one is an error naming file, key and type."""

import hashlib
import re

import pytest

from qkbench.errors import ProtocolError
from qkbench.protocol import Timing, load, parse, shipped

VALID = """
name = "tiny"
routes = ["split", "fused"]
tokens = [1, 4]

[timing]
passes = 12

[[geometry]]
name = "g"
heads_q = 2
heads_k = 1
head_dim = 64
"""


@pytest.mark.parametrize("name", sorted(shipped()))
def test_every_shipped_protocol_loads(name):
    p = load(name)
    assert p.name == name
    assert p.sha256 == hashlib.sha256(shipped()[name].encode()).hexdigest()
    assert p.cases() and p.candidates


def test_protocol_loads_from_a_file(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(VALID)
    p = load(str(path))
    assert (p.path, p.text, p.timing.passes) == (str(path), VALID, 12)


def test_defaults_fill_what_a_protocol_leaves_out():
    p = parse(VALID)
    assert p.timing == Timing(passes=12)
    assert (p.dtype, p.baseline, p.candidates) == ("bfloat16", "split", ("fused",))


def test_unknown_protocol_name_lists_the_shipped_ones():
    with pytest.raises(ProtocolError, match=r"no protocol file 'nonesuch'.*smoke"):
        load("nonesuch")


def test_a_number_key_accepts_an_integer():
    p = parse(VALID.replace('name = "tiny"', 'name = "tiny"\neps = 1'))
    assert p.eps == 1.0 and isinstance(p.eps, float)


# (id, edit of the valid text, what the error must name after the file)
BAD = [
    ("unknown-top-key", ("tokens = [1, 4]", "tokens = [1, 4]\ntoken = 3"),
     ["unknown key 'token'", "expected one of", "tokens"]),
    ("unknown-timing-key", ("passes = 12", "passes = 12\nsampels = 5"),
     ["unknown key 'timing.sampels'", "samples"]),
    ("unknown-geometry-key", ("head_dim = 64", "head_dim = 64\nheads_v = 1"),
     ["unknown key 'geometry[0].heads_v'", "heads_k"]),
    ("top-wrong-type", ("tokens = [1, 4]", 'tokens = "4"'),
     ["'tokens' must be an array", "got str '4'"]),
    ("timing-wrong-type", ("passes = 12", 'passes = "3"'),
     ["'timing.passes' must be an integer", "got str '3'"]),
    ("boolean-is-not-an-integer", ("passes = 12", "passes = true"),
     ["'timing.passes' must be an integer", "got bool True"]),
    ("float-is-not-an-integer", ("head_dim = 64", "head_dim = 64.0"),
     ["'geometry[0].head_dim' must be an integer", "got float 64.0"]),
    ("geometry-wrong-type", ("head_dim = 64", "head_dim = 64\ninplace = 1"),
     ["'geometry[0].inplace' must be a boolean", "got int 1"]),
    ("missing-top-key", ('routes = ["split", "fused"]\n', ""),
     ["missing required key 'routes'", "an array"]),
    ("no-geometry", ('[timing]\npasses = 12\n\n[[geometry]]\nname = "g"\nheads_q = 2\n'
                     'heads_k = 1\nhead_dim = 64\n', "geometry = []\n[timing]\npasses = 12\n"),
     ["'geometry' must be a non-empty array of tables ([[geometry]])"]),
    ("missing-geometry-key", ("head_dim = 64", ""),
     ["missing required key 'geometry[0].head_dim'", "an integer"]),
    ("token-list-of-strings", ("tokens = [1, 4]", 'tokens = ["1"]'),
     ["'tokens' must be a non-empty array of integers >= 1"]),
    ("unknown-schedule", ("passes = 12", 'passes = 12\nschedule = "zigzag"'),
     ["'timing.schedule' must be one of ['interleaved', 'blocked']", "'zigzag'"]),
    ("no-candidate", ('routes = ["split", "fused"]', 'routes = ["split"]'),
     ["'routes' needs a baseline and at least one candidate"]),
    ("not-toml", ("passes = 12", "passes = "), ["not valid TOML"]),
    ("nested-too-deeply", ("passes = 12", "passes = 12\nx = " + "[" * 100_000 + "]" * 100_000),
     ["not valid TOML: nested too deeply"]),
    ("unknown-style", ("head_dim = 64", 'head_dim = 64\nstyle = "llama"'),
     ["geometry[0] ('g'): style must be one of ('neox', 'gptj'), got 'llama'"]),
    ("unknown-weight-mode", ("head_dim = 64", 'head_dim = 64\nweight_mode = "gemma"'),
     ["geometry[0] ('g'): weight_mode must be one of"]),
    ("unknown-mrope-layout", ("head_dim = 64", 'head_dim = 64\nmrope_layout = "zigzag"'),
     ["geometry[0] ('g'): mrope_layout must be one of"]),
    ("odd-head-dim", ("head_dim = 64", "head_dim = 63"),
     ["geometry[0] ('g'): head_dim must be even and in [2, 512], got 63"]),
    ("rotary-over-head-dim", ("head_dim = 64", "head_dim = 64\nrotary_dim = 128"),
     ["geometry[0] ('g'): rotary_dim (128) must be even and in [2, head_dim=64]"]),
    ("mrope-section-sum", ("head_dim = 64", "head_dim = 64\nmrope_section = [8, 8, 8]"),
     ["mrope_section [8, 8, 8] sums to 24, expected rotary_dim / 2 = 32"]),
    ("no-query-heads", ("heads_q = 2", "heads_q = 0"),
     ["geometry[0] ('g'): heads_q must be >= 1, got 0"]),
    ("batch-not-dividing-tokens", ("head_dim = 64", "head_dim = 64\nbatch = 2"),
     ["geometry 'g': tokens [1] are not a multiple of its batch (2)"]),
]


def assert_refused_naming(tmp_path, edit: tuple[str, str], names: list[str]) -> None:
    """The valid protocol with ``edit`` applied, loaded from a file: one ProtocolError that
    starts with the file's path and names each of ``names``."""
    old, new = edit
    assert old in VALID
    path = tmp_path / "bad.toml"
    path.write_text(VALID.replace(old, new, 1))
    with pytest.raises(ProtocolError) as e:
        load(str(path))
    message = str(e.value)
    assert message.startswith(f"{path}: ")
    for name in names:
        assert name in message


@pytest.mark.parametrize(("edit", "names"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_protocol_error_names_file_key_and_expected_type(tmp_path, edit, names):
    assert_refused_naming(tmp_path, edit, names)


def test_overrides_apply_to_timing_and_routes():
    p = parse(VALID).with_overrides(routes=["split", "eager"], passes=6, samples=None,
                                    schedule="blocked")
    assert (p.timing.passes, p.timing.samples, p.timing.schedule) == (6, 200, "blocked")
    assert p.routes == ("split", "eager")


def test_overrides_leave_the_original_protocol_unchanged():
    p = parse(VALID)
    p.with_overrides(passes=6)
    assert p.timing.passes == 12


@pytest.mark.parametrize(("override", "message"), [
    ({"schedule": "zigzag"}, "'timing.schedule' must be one of"),
    ({"isolation": "thread"}, "'timing.isolation' must be one of"),
    ({"launch_state": "fast"}, "'timing.launch_state' must be one of \\['as-found', 'pdl'\\]"),
    ({"passes": 0}, "'timing.passes' must be >= 1, got 0"),
    ({"passes": 8}, "'timing.passes' must be a multiple of 6 \\(every arm order equally "
                    "often\\), got 8"),
    ({"chunk": 1}, "'timing.chunk' must be >= 2"),
    ({"retries": -1}, "'timing.retries' must be >= 0"),
    ({"clock_threshold": 0.0}, "'timing.clock_threshold' must be in \\(0, 1\\)"),
    ({"drop_threshold": 1.5}, "'timing.drop_threshold' must be in \\(0, 1\\)"),
    ({"routes": ["split"]}, "'routes' needs a baseline"),
    ({"speed": 2}, "unknown timing override"),
], ids=["schedule", "isolation", "launch-state", "passes", "passes-not-a-multiple-of-six",
        "chunk-of-one", "negative-retries", "clock-threshold", "threshold", "routes", "unknown"])
def test_overrides_are_validated(override, message):
    with pytest.raises(ProtocolError, match=message):
        parse(VALID).with_overrides(**override)


def test_resolved_settings_record_defaults_but_not_the_text():
    resolved = parse(VALID).resolved()
    assert "text" not in resolved and "path" not in resolved
    assert resolved["timing"]["drop_threshold"] == 0.01
    assert resolved["geometries"][0]["name"] == "g"


# -- values that would fail only once a run had started (caught at load) ---------------------

LATE = [
    ("max-position-zero", ("tokens = [1, 4]", "tokens = [1, 4]\nmax_position = 0"),
     ["'max_position' must be >= 1, got 0"]),
    ("negative-seed", ("passes = 12", "passes = 12\nseed = -1"),
     ["'timing.seed' must be in [0, 2^63 - 1], got -1"]),
    ("seed-past-64-bits", ("passes = 12", "passes = 12\nseed = 9223372036854775808"),
     ["'timing.seed' must be in [0, 2^63 - 1], got 9223372036854775808"]),
    ("passes-past-the-cap", ("passes = 12", "passes = 600000000000"),
     ["'timing.passes' must be at most 600, got 600,000,000,000"]),
    ("samples-past-the-cap", ("passes = 12", "passes = 12\nsamples = 100000000000"),
     ["'timing.samples' must be at most 1,000,000, got 100,000,000,000"]),
    ("retries-past-the-cap", ("passes = 12", "passes = 12\nretries = 1000000000"),
     ["'timing.retries' must be at most 10, got 1,000,000,000"]),
    ("name-a-path", ('name = "tiny"', 'name = "../../x"'),
     ["'name' must be one plain word", "it names the run's archive files", "'../../x'"]),
    ("name-empty", ('name = "tiny"', 'name = ""'), ["'name' must be one plain word", "''"]),
    ("geometry-name-a-control-character", ('name = "g"', 'name = "g\\u0001"'),
     ["'geometry[0].name' must be printable text", "JUnit XML", "'g\\x01'"]),
    ("band-name-blank", ("head_dim = 64", 'head_dim = 64\n\n[[band]]\nname = " "'),
     ["'band[0].name' must be printable text, not blank", "' '"]),
    ("geometry-name-trailing-space", ('name = "g"', 'name = "g "'),
     ["'geometry[0].name' must be printable text, not blank and without spaces at its ends",
      "'g '"]),
    ("table-over-int32", ("tokens = [1, 4]", "tokens = [1, 4]\nmax_position = 1000000000"),
     ["'max_position' 1000000000 on geometry 'g': its cos/sin table would have "
      "64,000,000,000 elements", "more than 2^31 - 1 per tensor"]),
    ("baseline-also-a-candidate", ('routes = ["split", "fused"]',
                                   'routes = ["split", "fused", "split"]'),
     ["the baseline 'split' is also a candidate", "['split', 'fused', 'split']"]),
    ("planted-not-dividing-inner-reps", ('routes = ["split", "fused"]',
                                         'routes = ["split", "split+1/3"]'),
     ["route 'split+1/3': N must divide 'timing.inner_reps' (32)"]),
    ("planted-not-an-ascii-integer", ('routes = ["split", "fused"]',
                                      'routes = ["split", "split+1/\u00b2"]'),
     ["route 'split+1/\u00b2': N in '+1/N' must be an integer >= 1"]),
    ("planted-twice", ('routes = ["split", "fused"]', 'routes = ["split", "split+1/2+1/4"]'),
     ["route 'split+1/2+1/4': a route takes one planted effect '+1/N', and 'split+1/2' has "
      "one already"]),
    ("eps-nan", ("tokens = [1, 4]", "tokens = [1, 4]\neps = nan"),
     ["'eps' must be finite and > 0, got nan"]),
    ("eps-inf", ("tokens = [1, 4]", "tokens = [1, 4]\neps = inf"),
     ["'eps' must be finite and > 0, got inf"]),
    ("eps-past-float32", ("tokens = [1, 4]", "tokens = [1, 4]\neps = 1e300"),
     ["'eps' must be finite in float32 (at most 3.403e+38), got 1e+300"]),
    ("eps-zero", ("tokens = [1, 4]", "tokens = [1, 4]\neps = 0"),
     ["'eps' must be finite and > 0, got 0.0"]),
    ("eps-negative", ("tokens = [1, 4]", "tokens = [1, 4]\neps = -1e-6"),
     ["'eps' must be finite and > 0, got -1e-06"]),
    ("duplicate-tokens", ("tokens = [1, 4]", "tokens = [1, 4, 1]"),
     ["'tokens' repeat [1]", "[1, 4, 1]"]),
    ("band-min-above-max", ("passes = 12", 'passes = 12\n[[band]]\nname = "b"\n'
                                          "tokens_min = 8\ntokens_max = 4"),
     ["band[0] ('b'): 'tokens_min' (8) is above 'tokens_max' (4)"]),
    ("band-names-repeat", ("passes = 12", 'passes = 12\n[[band]]\nname = "b"\n'
                                         '[[band]]\nname = "b"\ntokens_min = 4'),
     ["band names repeat (each names a row of the report): ['b', 'b']"]),
    ("negative-dispatch-margin", ("tokens = [1, 4]", "tokens = [1, 4]\ndispatch_margin = -1"),
     ["'dispatch_margin' must be finite and >= 0, got -1.0"]),
    ("tensor-over-int32", ("tokens = [1, 4]", "tokens = [1, 20000000]"),
     ["'tokens' 20000000 on geometry 'g': q would have 2,560,000,000 elements",
      "more than 2^31 - 1 per tensor"]),
    ("inputs-over-memory-cap", ("tokens = [1, 4]", 'tokens = [1, 12000000]\ndtype = "float32"'),
     ["'tokens' 12000000 on geometry 'g': q and k would take 8.6 GiB of float32",
      "more than the 8 GiB one case's inputs may take"]),
]


@pytest.mark.parametrize(("edit", "names"), [b[1:] for b in LATE], ids=[b[0] for b in LATE])
def test_a_value_that_would_fail_at_run_time_is_refused_at_load(tmp_path, edit, names):
    assert_refused_naming(tmp_path, edit, names)


def test_the_largest_token_count_under_both_bounds_loads():
    # bf16 q of (2 heads x 64) at 2^24 - 1 tokens: just under 2^31 elements and 6 GiB.
    assert parse(VALID.replace("tokens = [1, 4]", f"tokens = [{2**24 - 1}]")).tokens == (
        2**24 - 1,)


# -- a path is a path, a bare name is a shipped protocol -------------------------------------


@pytest.mark.parametrize("spec", ["nosuchdir/smoke.toml", "smoke.toml", "./smoke"])
def test_a_path_that_does_not_exist_is_an_error_not_the_shipped_protocol(
        tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProtocolError, match=rf"^no protocol file '{re.escape(spec)}' \(a path"):
        load(spec)


def test_a_bare_name_is_only_ever_a_shipped_protocol(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke").write_text(VALID)  # a file named like a shipped protocol
    (tmp_path / "tiny").write_text(VALID)
    assert load("smoke").text == shipped()["smoke"]
    with pytest.raises(ProtocolError, match=r"no protocol file 'tiny': a bare name picks a "
                                            r"shipped protocol .*; the file is \./tiny"):
        load("tiny")
    assert load("./tiny").text == VALID


def test_a_relative_toml_path_loads_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke.toml").write_text(VALID)
    assert load("smoke.toml").name == "tiny"


def test_a_directory_is_not_a_protocol_file(tmp_path):
    folder = tmp_path / "d.toml"
    folder.mkdir()
    with pytest.raises(ProtocolError, match=rf"^{re.escape(str(folder))}: is a directory"):
        load(str(folder))


def test_a_binary_protocol_file_is_named_as_not_text(tmp_path):
    path = tmp_path / "image.toml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    with pytest.raises(ProtocolError, match=rf"^{re.escape(str(path))}: not a text protocol "
                                            r"file \(byte 0 is not UTF-8\)"):
        load(str(path))


def test_the_largest_seed_a_protocol_takes_seeds_every_case(tmp_path):
    from qkbench.archive import read
    from qkbench.audit import examine
    from qkbench.protocol import MAX_SEED

    from synthetic import synthetic_sweep, tiny_protocol

    out = tmp_path / "run.json"
    synthetic_sweep(tiny_protocol("seeded", seed=MAX_SEED), out, effect=-0.5)
    run = read(out)
    assert run["status"] == "complete"
    assert all(p["status"] == "ok" for p in run["passes"])
    assert examine(run).problems == []  # each case's placement drawn from its seed
