"""Audit against tampering: every edit the issue lists, applied to a real smoke archive.

Each tamper is checked three ways: as made (the digests catch it), after a careful editor
recomputed every digest without a key (what consistency alone catches; what it cannot is
said below), and on a signed archive resealed without the key (the key catches it).
Re-indenting an archive is not an edit.
"""

import copy
import gzip
import json
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from qkbench import archive as archives
from qkbench import seal
from qkbench.archive import as_stored
from qkbench.audit import audit, examine
from qkbench.cli import app
from qkbench.schedule import order_of
from qkbench.summary import summarize

from helpers import reseal

KEY = b"a CI secret"
OTHER_KEY = b"someone else's secret"
FIXTURES = Path(__file__).parent / "fixtures"
QUICK = FIXTURES / "quick.toml"
RESULTS = Path(__file__).parent.parent / "results"


def resummarize(run: dict) -> None:
    run["summary"] = as_stored(summarize(run))


def _arms(run: dict, index: int) -> list[dict]:
    return run["passes"][index]["cases"][0]["comparisons"][0]["arms"]


def _delete_a_pass(run: dict) -> None:
    del run["passes"][3]
    resummarize(run)


def _duplicate_a_pass(run: dict) -> None:
    run["passes"].insert(3, copy.deepcopy(run["passes"][2]))


def _order_not_its_slots(run: dict) -> None:
    """Pass 2 claims slot 3's order, its arms rearranged to match."""
    p = run["passes"][2]
    p["order"] = list(order_of(3))
    for case in p["cases"]:
        for comp in case["comparisons"]:
            by_label = {a["label"]: a for a in comp["arms"]}
            comp["arms"] = [by_label[label] for label in p["order"]]
    resummarize(run)


def _swap_a_and_b(run: dict) -> None:
    arms = {a["label"]: a for a in _arms(run, 1)}
    arms["A"]["label"], arms["B"]["label"] = "B", "A"
    resummarize(run)


def _drop_a_sample(run: dict) -> None:
    _arms(run, 0)[1]["samples"].pop()
    resummarize(run)


def _drop_a_floor_sample(run: dict) -> None:
    run["passes"][0]["cases"][0]["comparisons"][0]["floor"]["samples"].pop()
    resummarize(run)


def _floor_of_another_graph(run: dict) -> None:
    run["passes"][0]["cases"][0]["comparisons"][0]["floor"]["launches_per_replay"] = 8


def _raise_the_drop_threshold(run: dict) -> None:
    run["protocol"]["resolved"]["timing"]["drop_threshold"] = 0.5
    resummarize(run)


def _set(path: str, value) -> callable:
    def edit(run: dict) -> None:
        *parents, key = path.split(".")
        table = run
        for parent in parents:
            table = table[int(parent)] if isinstance(table, list) else table[parent]
        table[key] = value(table[key]) if callable(value) else value
    return edit


def _figure(path: str, scale: float):
    def edit(run: dict) -> None:
        _set(path, lambda v: type(v)(v * scale))(run)
        resummarize(run)
    return edit


def _kernel_sha256(run: dict) -> None:
    run["environment"]["kernels_sha256"]["fused.py"] = "0" * 64


# Edits of the header alone: only a digest covers them.
HEADER_TAMPERS = {
    "dirty-flag": _set("environment.code.dirty", lambda v: not v),
    "torch-version": _set("environment.torch", "2.99.0"),
    "command": _set("command", ["qkbench", "sweep", "--samples", "1000"]),
    "created": _set("created", "2026-01-01T00:00:00+0000"),
    "status": _set("status", "running"),
}
# Edits that consistency catches as well (the code's identity: each pass records its own).
CONSISTENCY_TAMPERS = {
    "git-commit": _set("environment.code.commit", "0" * 40),
    "kernel-sha256": _kernel_sha256,
    "pass-deleted": _delete_a_pass,
    "pass-duplicated": _duplicate_a_pass,
    "order-not-its-slots": _order_not_its_slots,
    "a-b-labels-swapped": _swap_a_and_b,
    "sample-count": _drop_a_sample,
    "floor-sample-count": _drop_a_floor_sample,
    "floor-graph": _floor_of_another_graph,
    "copy-gbps": _figure("passes.0.limits.copy.gbps", 1.25),
    "launch-floor": _figure("passes.0.limits.launch_floor.one_program.median_s", 0.5),
    "case-bytes": _figure("passes.0.cases.0.bytes.fused", 0.5),
    "copy-bytes": _figure("passes.0.cases.0.copy.bytes", 2),
}
TAMPERS = {**HEADER_TAMPERS, "drop-threshold-raised": _raise_the_drop_threshold,
           **CONSISTENCY_TAMPERS}


@pytest.fixture(scope="module")
def signed(smoke_archive) -> dict:
    """The smoke archive as a sweep with ``QKBENCH_SIGNING_KEY`` set would have sealed it."""
    return reseal(copy.deepcopy(smoke_archive), KEY)


def tampered(run: dict, name: str) -> dict:
    edited = copy.deepcopy(run)
    TAMPERS[name](edited)
    return edited


def test_the_smoke_archive_is_sealed_and_audits_clean(smoke_archive):
    assert smoke_archive["schema_version"] == 4
    assert smoke_archive["seal"]["algorithm"] == "sha256"
    assert smoke_archive["seal"]["key_id"] is None
    found = examine(smoke_archive)
    assert (found.problems, found.notes) == ([], [])
    assert found.origin.startswith("consistency only: the archive is not signed")


def test_the_environment_records_numpy_and_scipy(smoke_archive):
    import numpy
    import scipy

    env = smoke_archive["environment"]
    assert (env["numpy"], env["scipy"]) == (numpy.__version__, scipy.__version__)


@pytest.mark.parametrize("name", list(TAMPERS))
def test_every_tamper_is_caught_by_the_digests(smoke_archive, name):
    problems = audit(tampered(smoke_archive, name))
    assert any(p.startswith(("seal: the header digest does not match",
                             "pass ")) for p in problems), problems


@pytest.mark.parametrize("name", list(CONSISTENCY_TAMPERS))
def test_structural_and_figure_tampers_are_caught_even_with_the_digests_recomputed(
        smoke_archive, name):
    problems = audit(reseal(tampered(smoke_archive, name)))
    assert problems
    assert not any(p.startswith("seal:") or "does not match its digest" in p for p in problems)


@pytest.mark.parametrize(("name", "expected"), [
    ("git-commit", "pass 0: ran other code than the run's environment records (git commit "
                   "000000000000 -> "),
    ("kernel-sha256", "pass 0: ran other code than the run's environment records "
                      "(kernels/fused.py 00000000 -> "),
    ("pass-deleted", "passes: indices [3] are missing (a deleted pass)"),
    ("pass-deleted", "status: complete, but primary passes [3] of 6 are missing"),
    ("pass-duplicated", "passes: index 2 appears 2 times (a duplicated pass)"),
    ("order-not-its-slots", "pass 2: order B A' A is not slot 2's permutation (B A A')"),
    ("a-b-labels-swapped", "pass 1 tiny-4x2/T1 split -> fused: arm B ran split, but B runs "
                           "the candidate route fused"),
    ("sample-count", "pass 0 tiny-4x2/T1 split -> fused: arm B has 4 timed and 2 warm-up "
                     "samples; the protocol's sample plan gives 5 and 2"),
    ("floor-sample-count", "pass 0 tiny-4x2/T1 split -> fused: the launch floor has 4 samples, "
                           "the protocol's timing gives 5"),
    ("floor-graph", "pass 0 tiny-4x2/T1 split -> fused: the launch floor ran 1 program(s) x 8 "
                    "launches a replay, not 1 x the protocol's inner_reps (2)"),
    ("copy-gbps", "pass 0 limits: copy gbps "),
    ("launch-floor", "pass 0 limits: launch_floor one_program median_s "),
    ("case-bytes", "pass 0 tiny-4x2/T1: bytes of route fused are "),
    ("copy-bytes", "pass 0 tiny-4x2/T1: the copy reference's bytes "),
])
def test_each_consistency_problem_is_named(smoke_archive, name, expected):
    problems = audit(reseal(tampered(smoke_archive, name)))
    assert any(p.startswith(expected) for p in problems), problems


def test_a_summary_count_edited_to_a_boolean_is_caught(smoke_archive):
    # In Python False == 0: the stored and recomputed counts must be of one kind too.
    edited = copy.deepcopy(smoke_archive)
    drops = edited["summary"]["comparisons"][0]["drops"]
    drops["dropped"] = bool(drops["dropped"])
    assert ("summary.comparisons[0].drops.dropped: stored "
            f"{drops['dropped']!r}, recomputed {int(drops['dropped'])}") in audit(reseal(edited))


def test_a_sample_edited_past_any_float_is_named_not_a_traceback(smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    edited["passes"][0]["cases"][0]["comparisons"][0]["arms"][0]["samples"][0] = 10**400
    assert audit(edited) == [
        "pass 0: raw content does not match its digest",
        "summary: cannot be recomputed from the passes (OverflowError: int too large to "
        "convert to float)"]


def test_a_protocol_record_edited_past_its_rules_is_named_as_problems_not_raised(
        smoke_archive):
    edited = copy.deepcopy(smoke_archive)
    edited["protocol"]["resolved"]["tokens"] = "1"
    problems = audit(reseal(edited))
    assert problems[0].startswith("protocol: the resolved settings cannot be rebuilt from its "
                                  "text (overrides: 'tokens' must be a non-empty array")
    assert any(p.startswith("summary: cannot be recomputed from the passes (ProtocolError: "
                            "overrides: 'tokens'") for p in problems), problems


def test_a_pass_index_edited_far_out_of_range_is_named_without_counting_to_it(
        smoke_archive):
    # Resealed: only the structure can tell. The missing indices are named, the first few
    # and a count, not by building a set of a hundred million of them.
    edited = copy.deepcopy(smoke_archive)
    edited["passes"][-1]["index"] = 10**8
    problems = audit(reseal(edited))
    top = len(smoke_archive["passes"]) - 1
    first = list(range(top, top + 10))
    assert (f"passes: indices {first} and {10**8 - top - 10:,} more are missing (a deleted "
            "pass)") in problems, problems


@pytest.mark.parametrize("name", list(HEADER_TAMPERS))
def test_without_a_key_a_resealed_header_edit_passes_consistency(smoke_archive, name):
    # What an unkeyed digest cannot do, and what audit says it does not: the header's
    # content is not derived from anything, so after a careful reseal only a key tells.
    found = examine(reseal(tampered(smoke_archive, name)))
    assert found.problems == []
    assert found.origin.startswith("consistency only")


def test_a_signed_archive_audits_clean_with_its_key(signed):
    found = examine(signed, KEY)
    assert found.problems == []
    assert found.origin.startswith("signed: its hmac-sha256 digests were verified")


@pytest.mark.parametrize("name", list(TAMPERS))
def test_a_resealed_edit_of_a_signed_archive_is_caught_with_the_key(signed, name):
    resealed = reseal(tampered(signed, name))  # digests recomputed, without the key
    assert "not signed: its digests are unkeyed, so its origin cannot be verified with " \
           "QKBENCH_SIGNING_KEY (anyone can recompute them after an edit)" in audit(resealed,
                                                                                      KEY)


@pytest.mark.parametrize("name", list(TAMPERS))
def test_an_edit_resigned_with_another_key_under_the_right_key_id_is_caught(signed, name):
    forged = reseal(tampered(signed, name), OTHER_KEY)
    forged["seal"]["key_id"] = signed["seal"]["key_id"]
    problems = audit(forged, KEY)
    assert "seal: the header digest does not match (its environment, protocol, settings, " \
           "command, created, status, resumes or list of passes was edited)" in problems
    assert all(f"pass {p['index']}: raw content does not match its digest" in problems
               for p in forged["passes"])


def test_an_archive_signed_with_another_key_fails(signed):
    problems = audit(signed, OTHER_KEY)
    assert problems == [f"seal: signed with another key (key id {seal.key_id(KEY)}; "
                        f"QKBENCH_SIGNING_KEY has key id {seal.key_id(OTHER_KEY)})"]


def test_a_signed_archive_without_the_key_says_it_cannot_verify_its_origin(signed):
    found = examine(signed)
    assert found.problems == []
    assert found.notes == [f"signed (hmac-sha256, key id {seal.key_id(KEY)}), but "
                           "QKBENCH_SIGNING_KEY is not set: its digests were not checked"]
    assert "cannot verify its origin" in found.origin


# -- through the CLI: a keyed sweep, audit with and without the key, re-indented files ----------


@pytest.fixture(scope="module")
def keyed_sweep(tmp_path_factory):
    """quick.toml swept with QKBENCH_SIGNING_KEY set (six in-process passes)."""
    path = tmp_path_factory.mktemp("keyed") / "run.json.gz"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QKBENCH_SIGNING_KEY", KEY.decode())
        mp.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
        result = CliRunner().invoke(app, ["sweep", "--protocol", str(QUICK), "--device", "cpu",
                                          "--out", str(path)])
    assert result.exit_code == 0, result.output
    return path


def audit_cli(path: Path, key: bytes | None, monkeypatch):
    if key is None:
        monkeypatch.delenv("QKBENCH_SIGNING_KEY", raising=False)
    else:
        monkeypatch.setenv("QKBENCH_SIGNING_KEY", key.decode())
    return CliRunner().invoke(app, ["audit", str(path)])


def test_a_sealed_archive_relabelled_schema_2_is_refused_as_malformed(
        smoke_archive, tmp_path, monkeypatch):
    # Schema 2 had no header digest: relabelling would let a header edit through unseen.
    edited = copy.deepcopy(smoke_archive)
    edited["schema_version"] = 2
    edited["environment"]["torch"] = "9.9.9"
    path = tmp_path / "relabelled.json"
    path.write_text(json.dumps(edited))
    result = audit_cli(path, None, monkeypatch)
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: {path}: malformed archive: schema_version 2 but it has resumed and seal, "
        "which only schema 3 and later archives have (was its version edited?)")


def test_an_archive_relabelled_schema_3_for_its_kept_widths_fails_its_seal(smoke_archive):
    # Schema 3 summaries take the width over kept passes alone, a narrower one.
    edited = copy.deepcopy(smoke_archive)
    edited["schema_version"] = 3
    assert "seal: the header digest does not match" in "; ".join(examine(edited).problems)


def test_a_sweep_with_a_key_signs_its_archive(keyed_sweep):
    run = archives.read(keyed_sweep)
    assert run["seal"] == {"algorithm": "hmac-sha256", "key_id": seal.key_id(KEY),
                           "header": seal.digest(seal.header_body(run), KEY)}
    assert all(p["digest"] == seal.pass_digest(p, KEY) for p in run["passes"])


def test_audit_with_the_key_verifies_the_signature(keyed_sweep, monkeypatch):
    result = audit_cli(keyed_sweep, KEY, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "proves signed: its hmac-sha256 digests were verified with QKBENCH_SIGNING_KEY" \
        in " ".join(result.stdout.split())


def test_audit_without_the_key_says_plainly_it_cannot_verify_origin(keyed_sweep, monkeypatch):
    result = audit_cli(keyed_sweep, None, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "QKBENCH_SIGNING_KEY is not set: its digests were not checked" in result.stderr
    assert "proves consistency only: the archive is signed, but without QKBENCH_SIGNING_KEY " \
           "audit cannot verify its origin" in " ".join(result.stdout.split())


def test_audit_of_an_unsigned_archive_says_it_checks_consistency_not_origin(smoke_sweep,
                                                                           monkeypatch):
    path, _ = smoke_sweep
    result = audit_cli(path, None, monkeypatch)
    assert result.exit_code == 0
    assert "proves consistency only: the archive is not signed" in " ".join(result.stdout.split())
    with_key = audit_cli(path, KEY, monkeypatch)
    assert with_key.exit_code == 1
    assert "mismatch: not signed: its digests are unkeyed" in with_key.stderr


@pytest.mark.parametrize("layout", [{"indent": 4}, {"indent": None},
                                    {"separators": (",", ":")}], ids=["indent4", "one-line",
                                                                      "compact"])
@pytest.mark.parametrize("key", [None, KEY], ids=["unsigned", "signed"])
def test_re_indenting_an_archive_is_not_an_edit(smoke_archive, signed, tmp_path, monkeypatch,
                                                layout, key):
    run = signed if key else smoke_archive
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run, **layout))
    result = audit_cli(path, key, monkeypatch)
    assert result.exit_code == 0, result.output


def test_verification_edited_to_ok_is_caught(tmp_path, monkeypatch):
    """A real sweep whose candidate fails verification (one bit off in every 8th element);
    its verification then edited to ok, the digests recomputed."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    path = tmp_path / "run.json"
    route = "invalid_routes:one_bit_off"
    result = CliRunner().invoke(app, ["sweep", "--protocol", str(QUICK), "--device", "cpu",
                                      "--route", "split", "--route", route, "--out", str(path)])
    assert result.exit_code == 1  # an invalid route
    run = archives.read(path)
    assert audit(run) == []
    edited = copy.deepcopy(run)
    check = edited["passes"][0]["cases"][0]["verification"][route]
    assert check["ok"] is False and check["differing_share"] > 0
    check["ok"] = True
    problems = audit(reseal(edited))
    assert (f"pass 0 tiny-2x1/T1: verification of {route} says ok=True, but its recorded errors "
            "give ok=False") in problems
    # The same edit made to the comparison too (invalid -> timed) cannot produce arms.
    assert any(p.startswith(f"pass 0 tiny-2x1/T1 split -> {route}: invalid routes")
               for p in problems)


def test_a_raised_drop_threshold_with_the_summary_recomputed_is_caught(smoke_archive, signed):
    # Where the smoke run dropped and replaced passes (a busy CPU), the recomputed summary
    # also stops matching the run's replacement history, and audit says so too; the seal
    # catches the edit either way.
    assert audit(tampered(smoke_archive, "drop-threshold-raised"))[0] == (
        "seal: the header digest does not match (its environment, protocol, settings, command, "
        "created, status, resumes or list of passes was edited)")
    # Resealed without the key: its lost signature gives it away.
    assert audit(reseal(tampered(signed, "drop-threshold-raised")), KEY)[0] == (
        "not signed: its digests are unkeyed, so its origin cannot be verified with "
        "QKBENCH_SIGNING_KEY (anyone can recompute them after an edit)")


# -- archives from before: audited by what they have --------------------------------------------


COMMITTED = sorted(RESULTS.glob("h*/*.json"))


def _run_archives(schema: int) -> list[Path]:
    """Every committed run archive of ``schema`` (the other JSON under results/ are bench
    outputs)."""
    found = []
    for path in sorted(RESULTS.rglob("*.json*")):
        if path.suffix not in (".json", ".gz") or "logs" in path.parts:
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            head = json.load(f)
        if (isinstance(head, dict) and head.get("kind") == archives.KIND
                and head.get("schema_version") == schema):
            found.append(path)
    return found


# Sealed archives: schema 3 (widths over kept passes) and today's.
SEALED = [p for schema in range(3, archives.SCHEMA_VERSION + 1) for p in _run_archives(schema)]


@pytest.mark.parametrize("path", SEALED, ids=[str(p.relative_to(RESULTS)) for p in SEALED])
def test_every_committed_sealed_archive_audits_clean_by_the_rules_of_its_schema(path):
    assert examine(archives.read(path)).problems == []


@pytest.mark.parametrize("path", COMMITTED, ids=[f"{p.parent.name}/{p.name}" for p in COMMITTED])
def test_committed_schema_1_archives_audit_clean_and_say_what_was_not_checked(path):
    found = examine(archives.read(path))
    assert found.problems == []
    assert found.notes[0].startswith("schema 1 archive: audited by what it has")
    assert found.origin == ("consistency only: a schema 1 archive has no header digest and no "
                            "signature")


def test_a_schema_1_archive_audited_with_a_key_is_not_signed():
    problems = audit(archives.read(COMMITTED[0]), KEY)
    assert problems == ["not signed: its digests are unkeyed, so its origin cannot be verified "
                        "with QKBENCH_SIGNING_KEY (anyone can recompute them after an edit)"]


def test_an_edited_schema_1_archive_is_still_caught():
    run = archives.read(COMMITTED[0])
    run["passes"][1]["order"] = run["passes"][2]["order"]
    problems = audit(run)
    assert "pass 1: raw content does not match its digest" in problems
    assert any(p.startswith("pass 1: order ") for p in problems)


# -- resume and the seal ---------------------------------------------------------------------


def _resume(path: Path):
    return CliRunner().invoke(app, ["sweep", "--protocol", str(QUICK), "--device", "cpu",
                                    "--resume", "--out", str(path)])


def test_resume_refuses_an_archive_edited_since_it_was_written(one_pass, tmp_path):
    path = tmp_path / "run.json"
    run = archives.read(one_pass)
    run["environment"]["torch"] = "2.99.0"
    archives.write(path, run)
    result = _resume(path)
    assert result.exit_code == 1
    assert (f"{path}: cannot resume: it was edited since it was written (seal: the header "
            "digest does not match") in result.stderr
    assert archives.read(path)["passes"] == run["passes"]


def test_resume_of_an_unsigned_archive_with_a_key_is_refused(one_pass, tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    path.write_bytes(one_pass.read_bytes())
    monkeypatch.setenv("QKBENCH_SIGNING_KEY", KEY.decode())
    result = _resume(path)
    assert result.exit_code == 1
    assert "cannot resume: it is not signed, and QKBENCH_SIGNING_KEY is set" in result.stderr


def test_resume_of_a_signed_archive_without_its_key_is_refused(one_pass, tmp_path):
    path = tmp_path / "run.json"
    archives.write(path, reseal(archives.read(one_pass), KEY))
    result = _resume(path)
    assert result.exit_code == 1
    assert "cannot resume: it is signed (hmac-sha256); set QKBENCH_SIGNING_KEY" in result.stderr


def test_resume_of_a_complete_archive_with_a_key_set_measures_nothing_and_passes(
        smoke_sweep, tmp_path, monkeypatch):
    # Nothing is written, so there is nothing to sign: the key has no say.
    path = tmp_path / "run.json"
    path.write_bytes(smoke_sweep[0].read_bytes())
    monkeypatch.setenv("QKBENCH_SIGNING_KEY", KEY.decode())
    result = CliRunner().invoke(app, ["sweep", "--protocol", "smoke", "--device", "cpu",
                                      "--resume", "--out", str(path)])
    assert result.exit_code == 0, result.output
    assert "the archive is complete already; nothing was measured" in result.stderr
    assert path.read_bytes() == smoke_sweep[0].read_bytes()


def test_resume_of_a_complete_archive_edited_since_is_refused(smoke_sweep, tmp_path):
    path = tmp_path / "run.json"
    run = archives.read(smoke_sweep[0])
    run["passes"][0]["cases"][0]["comparisons"][0]["arms"][0]["samples"][0] *= 2
    archives.write(path, run)
    result = CliRunner().invoke(app, ["sweep", "--protocol", "smoke", "--device", "cpu",
                                      "--resume", "--out", str(path)])
    assert result.exit_code == 1
    assert (f"{path}: cannot resume: it was edited since it was written (pass 0: raw content "
            "does not match its digest") in result.stderr


def test_the_worker_never_sees_the_signing_key(monkeypatch):
    from qkbench import runner

    monkeypatch.setenv("QKBENCH_SIGNING_KEY", KEY.decode())
    child = runner._worker_env(torch.device("cpu"))
    assert "QKBENCH_SIGNING_KEY" not in child
    assert child["QKBENCH_MANAGER_PID"] == str(os.getpid())


def test_audit_help_says_what_the_key_changes():
    text = " ".join(CliRunner().invoke(app, ["audit", "--help"]).stdout.replace("│", " ").split())
    assert "an unsigned archive fails; without it, audit checks consistency only" in text



@pytest.mark.parametrize("rule", [(True, True), (True, False), (False, False)],
                         ids=["today", "first-round-timed", "before-2026-12-05"])
def test_a_blocked_run_without_warm_up_audits_clean_by_the_sample_plan_it_was_made_with(
        tmp_path, monkeypatch, rule):
    from qkbench import schedule

    from synthetic import synthetic_sweep, tiny_protocol

    made_with = schedule.sample_plan
    sync_carries, starts_after_sync = rule

    def plan(*args):
        return made_with(*args, sync_carries=sync_carries, starts_after_sync=starts_after_sync)

    monkeypatch.setattr(schedule, "sample_plan", plan)  # the worker's, not audit's
    # 64 samples, a synchronisation every 64 rounds: one falls between arms A and B.
    text = tiny_protocol("blocked0", (1,), samples=64, warmup=0, schedule="blocked")
    synthetic_sweep(text, tmp_path / "run.json")
    run = archives.read(tmp_path / "run.json")
    warm = {len(a["warmup"]) for p in run["passes"] for c in p["cases"]
            for comp in c["comparisons"] for a in comp["arms"]}
    assert (warm != {0}) == (rule != (False, False))  # the rules differ here
    assert audit(run) == []
