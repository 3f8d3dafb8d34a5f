"""Audit: what an archive's own content proves about it.

- **Digests** (``seal.py``): every pass's raw content, and the header (environment,
  protocol, settings, command, created, status, resumes and the list of pass digests),
  against the digests written with them. Unkeyed (sha256) digests catch careless edits
  only: anyone can recompute them. Signed ones (HMAC-SHA256) are verified with
  ``QKBENCH_SIGNING_KEY``; without the key audit says it cannot verify the origin, and
  with the key an unsigned archive fails.
- **The header**: the protocol text against its hash, the resolved settings and the run's
  settings against the protocol text.
- **Structure**: pass indices unique and without gaps; each pass's arm order the
  permutation of its slot; a complete run has every primary pass and no slot still
  open; every replacement pass was due (its slot's earlier attempts at its cases were
  dropped or failed, and it measures exactly those cases); each pass measures the cases
  its job names, each case as the protocol defines it; sample and warm-up counts as the
  protocol's sample plan gives; placement seeds (and the placement drawn from them)
  derived from the base seed; A and A' run the baseline route and B the candidate;
  verification's ``ok`` follows from its recorded errors; each pass ran the code its run
  (or the resume that started it) recorded.
- **Figures**: every in-pass derived number recomputed from what it derives from (the
  copy bandwidth and medians of the limits from their samples, each case's bytes from
  its geometry by the routes' byte models, the copy reference's bytes), and every summary
  recomputed from the raw samples (schema 1 archives by their own rules, ``legacy.py``).

Schema 1 and 2 archives predate some of this (no header digest, no signature, no per-pass
code in schema 1): they are audited by what they have, and the notes say what was not.
"""

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from itertools import islice
from math import ceil
from pathlib import Path
from statistics import median

import numpy as np
import torch

from qkbench import archive as archives
from qkbench import env, legacy, seal
from qkbench.accuracy import within_tolerance
from qkbench.archive import as_stored, run_settings
from qkbench.case import DTYPES, Case, Inputs
from qkbench.errors import ArchiveError, QkbenchError
from qkbench.protocol import Protocol, as_recorded, rebuild
from qkbench.schedule import MAX_PADDING_BYTES, order_of, placement_seed, sample_plan
from qkbench.summary import MALFORMED, OPEN, PENDING, current, open_slots, summarize

LEGACY_NOTE = {
    1: "schema 1 archive: audited by what it has (pass digests, the protocol, structure, "
       "in-pass figures, the summary by the schema 1 rules); it predates header digests, "
       "signing, per-pass code and replacement passes, so its environment, command, created "
       "and status are covered by no digest",
    2: "schema 2 archive: audited by what it has (pass digests, the protocol, structure, "
       "per-pass code, in-pass figures, the summary); it predates header digests and "
       "signing, so its environment, command, created and status are covered by no digest",
}


@dataclass
class Findings:
    """What audit found: problems (any one fails it), notes, and what the digests prove."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    origin: str = ""


def audit(archive: dict, key: bytes | None = None) -> list[str]:
    """The problems found; an empty list means the archive is consistent (and, with
    ``key``, signed with it)."""
    return examine(archive, key).problems


def examine(archive: dict, key: bytes | None = None, stored_summary: bool = True) -> Findings:
    """Every problem and note ``audit`` reports; without ``stored_summary``, the stored
    summary is not compared with the one recomputed (what a reader that only ever shows the
    recomputed one needs)."""
    found = Findings()
    schema = archive.get("schema_version")
    text = archive["protocol"]["text"]
    if hashlib.sha256(text.encode()).hexdigest() != archive["protocol"]["sha256"]:
        found.problems.append("protocol: text does not match its sha256")
    found.problems += header_problems(archive)
    _digests(archive, key, found)
    if schema in LEGACY_NOTE:
        found.notes.append(LEGACY_NOTE[schema])
    passes = archive["passes"]
    if archive["status"] not in ("running", "complete"):
        found.problems.append(f"status: {archive['status']!r} is neither running nor complete")
    if not passes and archive["summary"] is None:
        if archive["status"] == "complete":
            found.problems.append("status: complete, but the run has no passes")
        else:
            found.notes.append("no passes yet: the run stopped (or is running) before its "
                               "first pass finished; nothing to recompute")
        return found
    rules = legacy.summarize if schema == 1 else summarize
    try:
        recomputed = as_stored(rules(archive))
    except (*MALFORMED, QkbenchError) as e:  # QkbenchError: a protocol record edited
        found.problems.append(f"summary: cannot be recomputed from the passes "
                              f"({type(e).__name__}: {e})")
        return found
    try:
        proto = rebuild(archive["protocol"])
        _structure(archive, proto, recomputed if schema != 1 else None, found)
    except (QkbenchError, KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        found.problems.append(f"structure: cannot be checked ({type(e).__name__}: {e})")
    if stored_summary:
        found.problems += _differences(archive["summary"], recomputed)
    return found


def read_checked(path: Path) -> dict:
    """An archive read to be reported or judged, refused (ArchiveError) where ``audit``
    finds a problem (its digests, a signed one's where ``QKBENCH_SIGNING_KEY`` is set; its
    protocol and header; its structure) or its passes cannot be summarised: what it shows
    could then be anything. Names the first problem; ``audit`` lists every one. Its summary
    is read with ``current``, never the stored one, so that is not compared."""
    run = archives.read(path)
    key = seal.signing_key() if seal.is_signed(run) else None
    # The digests and the header first: an edit is named as one before what it broke.
    problems = digest_problems(run, key) + header_problems(run)
    if not problems:
        try:
            current(run)
        except ArchiveError as e:
            raise ArchiveError(f"{path}: {e}") from None
        problems = examine(run, key, stored_summary=False).problems
    if problems:
        raise ArchiveError(f"{path}: {problems[0]} (qkbench audit {path} lists every "
                           "problem)")
    return run


# -- digests -----------------------------------------------------------------------------------


def digest_problems(archive: dict, key: bytes | None) -> list[str]:
    """The digests that do not match (with ``key`` where the archive is signed)."""
    found = Findings()
    _digests(archive, key, found)
    return found.problems


def _check_digests(archive: dict, key: bytes | None, found: Findings,
                   header: bool = True) -> None:
    for p in archive["passes"]:
        if not seal.verify(p.get("digest"), seal.pass_digest(p, key)):
            found.problems.append(f"pass {p.get('index')}: raw content does not match its "
                                  "digest")
    if header and not seal.verify(archive["seal"].get("header"),
                                  seal.digest(seal.header_body(archive), key)):
        found.problems.append("seal: the header digest does not match (its environment, "
                              "protocol, settings, command, created, status, resumes or list "
                              "of passes was edited)")


def _digests(archive: dict, key: bytes | None, found: Findings) -> None:
    schema = archive.get("schema_version")
    unsigned_with_key = (f"not signed: its digests are unkeyed, so its origin cannot be "
                         f"verified with {seal.KEY_ENV} (anyone can recompute them after an "
                         "edit)")
    if schema in (1, 2):
        _check_digests(archive, None, found, header=False)
        if key is not None:
            found.problems.append(unsigned_with_key)
        found.origin = (f"consistency only: a schema {schema} archive has no header digest "
                        "and no signature")
        return
    recorded = archive.get("seal")
    if not isinstance(recorded, dict):
        found.problems.append("seal: missing (every write of a schema 3 or later archive seals "
                              "it)")
        found.origin = "nothing: the archive has no seal"
        return
    algorithm = recorded.get("algorithm")
    if algorithm == seal.SHA256:
        _check_digests(archive, None, found)
        if key is not None:
            found.problems.append(unsigned_with_key)
        found.origin = ("consistency only: the archive is not signed (sha256 digests catch "
                        "careless edits; a careful editor can recompute them), so its origin "
                        "is not verified")
    elif algorithm == seal.HMAC_SHA256:
        signer = recorded.get("key_id")
        if key is None:
            found.notes.append(f"signed ({seal.HMAC_SHA256}, key id {signer}), but "
                               f"{seal.KEY_ENV} is not set: its digests were not checked")
            found.origin = (f"consistency only: the archive is signed, but without "
                            f"{seal.KEY_ENV} audit cannot verify its origin or its digests")
        elif signer != seal.key_id(key):
            found.problems.append(f"seal: signed with another key (key id {signer}; "
                                  f"{seal.KEY_ENV} has key id {seal.key_id(key)})")
            found.origin = "nothing: the archive is signed with another key"
        else:
            _check_digests(archive, key, found)
            found.origin = (f"signed: its {seal.HMAC_SHA256} digests were verified with "
                            f"{seal.KEY_ENV} (key id {signer}): written by a holder of the "
                            "key, and not edited since")
    else:
        found.problems.append(f"seal: unknown algorithm {algorithm!r} (expected one of "
                              f"{', '.join(seal.ALGORITHMS)})")
        found.origin = "nothing: the seal's algorithm is unknown"


# -- header ------------------------------------------------------------------------------------


def header_problems(archive: dict) -> list[str]:
    """Whether the resolved settings and the run's settings follow from the protocol text."""
    resolved = archive["protocol"]["resolved"]
    try:
        proto = rebuild(archive["protocol"])
    except (QkbenchError, KeyError, TypeError) as e:
        # An edit, or a protocol written before a rule this qkbench checks at load.
        return [f"protocol: the resolved settings cannot be rebuilt from its text ({e}; an "
                "edit, or a protocol that breaks a rule newer than the run)"]
    problems = []
    rebuilt = as_recorded(as_stored(proto.resolved()), resolved)
    if rebuilt != resolved:
        problems.append("protocol: the resolved settings do not follow from its text and "
                        "the recorded routes and timing")
    settings = archive["settings"]
    expected = run_settings(proto, settings.get("device"))
    problems += [f"settings.{key}: {settings.get(key)!r} disagrees with the protocol's {value!r}"
                 for key, value in expected.items() if settings.get(key) != value]
    return problems


# -- structure -------------------------------------------------------------------------------


def _slot(p: dict) -> int:
    return p["index"] if p.get("replaces") is None else p["replaces"]


def _structure(archive: dict, proto: Protocol, summary: dict | None, found: Findings) -> None:
    problems = found.problems
    t = proto.timing
    passes = archive["passes"]
    indices = [p["index"] for p in passes]
    for index, n in sorted(Counter(indices).items()):
        if n > 1:
            problems.append(f"passes: index {index} appears {n} times (a duplicated pass)")
    present = set(indices)
    top = max(indices, default=-1)
    # Counted, not listed: a tampered index of 10**8 must not make a set of that size.
    absent = top + 1 - sum(0 <= i <= top for i in present)
    if absent > 0:
        # The first absent ones lie within len(present) + 10 of 0.
        first = list(islice((i for i in range(top + 1) if i not in present), 10))
        more = f" and {absent - len(first):,} more" if absent > len(first) else ""
        problems.append(f"passes: indices {first}{more} are missing (a deleted pass)")
    primaries = {p["index"] for p in passes if p.get("replaces") is None}
    if archive["status"] == "complete":
        absent = [i for i in range(t.passes) if i not in primaries]
        if absent:
            problems.append(f"status: complete, but primary passes {absent} of "
                            f"{t.passes} are missing")
        if summary is not None:
            for comp in summary["comparisons"]:
                for cell in comp["cases"]:
                    for s in cell["slots"]:
                        if s["status"] in (OPEN, PENDING):
                            problems.append(
                                f"status: complete, but slot {s['slot']} of "
                                f"{comp['baseline']} -> {comp['candidate']} {cell['key']} is "
                                f"{s['status']} (its passes are missing)")
    for p in passes:
        index, replaces = p["index"], p.get("replaces")
        if replaces is None and not 0 <= index < t.passes:
            problems.append(f"pass {index}: a primary pass beyond the run's {t.passes}")
        if replaces is not None:
            if not (isinstance(replaces, int) and 0 <= replaces < t.passes):
                problems.append(f"pass {index}: replaces slot {replaces!r}, not a slot of this "
                                f"run (0 to {t.passes - 1})")
                continue
            if index < t.passes:
                problems.append(f"pass {index}: a replacement pass with a primary pass's index")
        slot = _slot(p)
        if p["order"] != list(order_of(slot)):
            problems.append(f"pass {index}: order {' '.join(p['order'])} is not slot {slot}'s "
                            f"permutation ({' '.join(order_of(slot))})")
        if p["status"] == "ok":
            _pass(archive, proto, p, found)
        elif p["status"] != "failed":
            problems.append(f"pass {index}: status {p['status']!r} is neither ok nor failed")
        elif "cases" in p:
            problems.append(f"pass {index}: failed, yet it records measured cases")
    if archive["schema_version"] >= 2:
        _replacements_due(archive, found)
        _code(archive, found)


def _replacements_due(archive: dict, found: Findings) -> None:
    """Each replacement pass measures exactly the cases of its slot that were open (every
    earlier attempt dropped or failed, retries left) when it started."""
    for r in sorted((p for p in archive["passes"] if p.get("replaces") is not None),
                    key=lambda p: p["index"]):
        earlier = {**archive, "passes": [p for p in archive["passes"]
                                         if p["index"] < r["index"]]}
        due = open_slots(summarize(earlier)).get(r["replaces"], [])
        keys = sorted(r.get("case_keys") or [])
        if keys != due:
            what = f"cases {due}" if due else "no case"
            found.problems.append(f"pass {r['index']}: replaces slot {r['replaces']} for cases "
                                  f"{keys}, but {what} of that slot needed a replacement then")


def _code(archive: dict, found: Findings) -> None:
    """Each pass ran the code its run recorded when it started, or when the resume that ran
    the pass started; a resume ran other code only when let (``--allow-code-change``)."""
    header = env.environment_code(archive["environment"])
    resumes = sorted(archive.get("resumed") or [], key=lambda r: r["after_passes"])
    for n, r in enumerate(resumes):
        differ = env.code_differences(header, r["code"])
        if differ and not r.get("allowed_code_change"):
            found.problems.append(f"resume {n + 1}: ran other code than the run started with "
                                  f"({'; '.join(differ)}) without --allow-code-change")
    for p in archive["passes"]:
        if "code" not in p:
            continue
        differ = env.code_differences(env.run_code(archive, p["index"]), p["code"])
        if differ:
            where = ("the resume that ran it" if env.resume_of(archive, p["index"]) else
                     "the run's environment")
            found.problems.append(f"pass {p['index']}: ran other code than {where} records "
                                  f"({'; '.join(differ)})")
    found.notes += code_lines(archive)


def code_lines(archive: dict) -> list[str]:
    """Which passes ran which code, where not all ran the code the run started with
    (a resume with ``--allow-code-change``); nothing when they all did."""
    header = env.environment_code(archive["environment"])
    groups: dict[tuple, list[int]] = {}
    for p in archive["passes"]:
        if "code" in p:
            differ = tuple(env.code_differences(header, p["code"]))
            groups.setdefault(differ, []).append(p["index"])
    if set(groups) <= {()}:
        return []
    return [f"code: passes {_ranges(indices)} ran "
            + ("the code the run started with" if not differ else "other code ("
               + "; ".join(differ) + ")")
            for differ, indices in sorted(groups.items(), key=lambda g: min(g[1]))]


def _ranges(indices: list[int]) -> str:
    out, run = [], []
    for i in sorted(indices):
        if run and i != run[-1] + 1:
            out.append(run)
            run = []
        run.append(i)
    out.append(run)
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in out)


# -- one pass --------------------------------------------------------------------------------


def _pass(archive: dict, proto: Protocol, p: dict, found: Findings) -> None:
    problems = found.problems
    index = p["index"]
    cases = proto.cases()
    wanted = p.get("case_keys")
    expected = [c.key for c in cases if wanted is None or c.key in wanted]
    got = [c["key"] for c in p["cases"]]
    if got != expected:
        problems.append(f"pass {index}: measured cases {got}, but its job names {expected}")
    by_key = {c.key: (i, c) for i, c in enumerate(cases)}
    for result in p["cases"]:
        if result["key"] in by_key:
            _case(archive, proto, p, *by_key[result["key"]], result, found)
    if p.get("limits"):
        _limits(archive, p, found)


def _case(archive: dict, proto: Protocol, p: dict, case_index: int, case: Case,
          result: dict, found: Findings) -> None:
    problems = found.problems
    t = proto.timing
    schema = archive["schema_version"]
    where = f"pass {p['index']} {case.key}"
    if result["case"] != as_stored(case.as_dict()):
        problems.append(f"{where}: its case differs from the protocol's")
    if "error" in result:  # not measured (out of memory): nothing else was recorded
        return
    seed = placement_seed(t.seed, p["index"], case_index)
    if result["placement_seed"] != seed:
        problems.append(f"{where}: placement seed {result['placement_seed']} is not the one "
                        f"derived from the base seed ({seed})")
    routes = list(dict.fromkeys(proto.routes))
    checks = result["verification"]
    if sorted(checks) != sorted(routes):
        problems.append(f"{where}: verification of routes {sorted(checks)}, not the "
                        f"protocol's {sorted(routes)}")
    for name, check in checks.items():
        _verification(where, name, check, DTYPES[case.dtype], found)
    _bytes(archive, proto, where, case, result, found)
    if len(result["copy"]["samples"]) != t.samples:
        problems.append(f"{where}: the copy reference has {len(result['copy']['samples'])} "
                        f"samples, the protocol's timing gives {t.samples}")
    pairs = [(proto.baseline, c) for c in proto.candidates]
    comps = result["comparisons"]
    if [(c["baseline"], c["candidate"]) for c in comps] != pairs:
        problems.append(f"{where}: comparisons {[(c['baseline'], c['candidate']) for c in comps]}"
                        f", not the protocol's {pairs}")
    # Per arm, the warm-up counts the sample plan allows: today's rule's and the earlier
    # rules' (``sample_plan``), which differ only without a warm-up.
    untimed = [Counter(a for a, timed in zip(plan.arms, plan.timed, strict=True) if not timed)
               for plan in (sample_plan(3, t.warmup, t.samples, t.schedule, t.chunk, *rule)
                            for rule in ((True, True), (True, False), (False, False)))]
    warmups = [sorted({counts[i] for counts in untimed}) for i in range(3)]
    for k, comp in enumerate(comps):
        bad = [r for r in (comp["baseline"], comp["candidate"])
               if not checks.get(r, {}).get("ok")]
        name = f"{where} {comp['baseline']} -> {comp['candidate']}"
        if comp["status"] == "invalid":
            if not bad or comp.get("invalid_routes") != bad:
                problems.append(f"{name}: invalid routes {comp.get('invalid_routes')}, but "
                                f"verification failed {bad or 'none'}")
            continue
        if comp["status"] != "ok":
            problems.append(f"{name}: status {comp['status']!r} is neither ok nor invalid")
            continue
        if bad:
            problems.append(f"{name}: timed, although {bad} failed verification")
        labels = [a["label"] for a in comp["arms"]]
        if labels != p["order"]:
            problems.append(f"{name}: arms {labels} are not in the pass's order {p['order']}")
        for i, arm in enumerate(comp["arms"]):
            role = {"A": "baseline", "A'": "baseline", "B": "candidate"}.get(arm["label"])
            if role is None:
                problems.append(f"{name}: unknown arm label {arm['label']!r}")
                continue
            if arm["route"] != comp[role]:
                problems.append(f"{name}: arm {arm['label']} ran {arm['route']}, but "
                                f"{arm['label']} runs the {role} route {comp[role]}")
            warm = [t.warmup] if schema == 1 else warmups[i]
            if len(arm["samples"]) != t.samples or len(arm["warmup"]) not in warm:
                problems.append(f"{name}: arm {arm['label']} has {len(arm['samples'])} timed "
                                f"and {len(arm['warmup'])} warm-up samples; the protocol's "
                                f"sample plan gives {t.samples} and "
                                f"{' or '.join(map(str, warm))}")
        if "placement" in comp:
            _placement(name, comp["placement"], seed + k, p["order"], found)
        if "floor" in comp:
            floor = comp["floor"]
            if len(floor["samples"]) != t.samples:
                problems.append(f"{name}: the launch floor has {len(floor['samples'])} "
                                f"samples, the protocol's timing gives {t.samples}")
            if (floor["programs"], floor["launches_per_replay"]) != (1, t.inner_reps):
                problems.append(f"{name}: the launch floor ran {floor['programs']} program(s) "
                                f"x {floor['launches_per_replay']} launches a replay, not 1 x "
                                f"the protocol's inner_reps ({t.inner_reps})")


def _verification(where: str, name: str, check: dict, dtype: torch.dtype,
                  found: Findings) -> None:
    """``ok`` as its recorded numbers give it."""
    if "unsupported" in check or "error" in check:
        ok = False
    else:
        ok = all(within_tolerance(e, dtype) for e in check["oracle"].values())
        if "exact_with" in check:
            ok = ok and check["differing_share"] == 0.0
    if check["ok"] is not ok:
        found.problems.append(f"{where}: verification of {name} says ok={check['ok']}, but its "
                              f"recorded errors give ok={ok}")


def _placement(name: str, placement: dict, seed: int, order: list[str],
               found: Findings) -> None:
    """The allocation order and the first padding, as the comparison's seed draws them."""
    rng = np.random.default_rng(seed)
    allocation = [order[j] for j in rng.permutation(len(order))]
    first_padding = int(rng.integers(1, MAX_PADDING_BYTES))
    if (placement["allocation_order"] != allocation
            or placement["padding_bytes"].get(allocation[0]) != first_padding):
        found.problems.append(f"{name}: its placement is not the one its seed ({seed}) draws")


def shape_inputs(case: Case) -> Inputs:
    """A case's inputs as shapes and dtypes only (meta tensors): what a byte model reads."""
    g = case.geometry
    dtype = DTYPES[case.dtype]
    lead = (g.batch, case.tokens // g.batch) if g.batch else (case.tokens,)

    def empty(*shape, dtype=dtype):
        return torch.empty(*shape, dtype=dtype, device="meta")

    table = dtype if case.table_dtype == "activation" else DTYPES[case.table_dtype]
    positions = (3, *lead) if g.mrope_section else lead
    return Inputs(empty(*lead, g.heads_q, g.head_dim), empty(*lead, g.heads_k, g.head_dim),
                  empty(g.head_dim), empty(g.head_dim),
                  empty(*positions, dtype=getattr(torch, case.positions_dtype)),
                  empty(case.max_position, g.rotary, dtype=table),
                  {"eps": case.eps, "rotary_dim": g.rotary, "style": g.style,
                   "weight_mode": g.weight_mode, "mrope_section": g.mrope_section,
                   "mrope_layout": g.mrope_layout})


@cache
def _byte_model(name: str):
    """The byte model of route ``name``, or the reason it cannot be had here."""
    from qkbench.kernels import traffic
    from qkbench.routes import resolve

    try:
        return resolve(name).traffic or traffic.fused_bytes
    except QkbenchError as e:
        return str(e)


def _bytes(archive: dict, proto: Protocol, where: str, case: Case, result: dict,
           found: Findings) -> None:
    from qkbench.worker import MAX_COLD_SETS

    t = proto.timing
    inputs = shape_inputs(case)
    qk = sum(x.numel() * x.element_size() for x in (inputs.q, inputs.k))
    if result["copy"]["bytes"] != 2 * qk:
        found.problems.append(f"{where}: the copy reference's bytes {result['copy']['bytes']} "
                              f"are not its q and k read and written ({2 * qk})")
    if "input_set_bytes" in result and result["input_set_bytes"] != qk:
        found.problems.append(f"{where}: input_set_bytes {result['input_set_bytes']} are not "
                              f"its q and k ({qk})")
    if "input_sets" in result:
        l2 = (archive["environment"].get("gpu") or {}).get("l2_bytes")
        sets = (min(MAX_COLD_SETS, max(1, ceil(2 * l2 / qk)))
                if t.cache == "cold" and l2 else 1)
        if result["input_sets"] != sets:
            found.problems.append(f"{where}: {result['input_sets']} input sets, but its cache "
                                  f"({t.cache}) and the L2 give {sets}")
        if ("launches_per_replay" in result
                and result["launches_per_replay"] != max(t.inner_reps, result["input_sets"])):
            found.problems.append(f"{where}: {result['launches_per_replay']} launches per "
                                  f"replay, not max(inner_reps, input sets)")
    routes = list(dict.fromkeys(proto.routes))
    if sorted(result["bytes"]) != sorted(routes):
        found.problems.append(f"{where}: bytes of routes {sorted(result['bytes'])}, not the "
                              f"protocol's {sorted(routes)}")
    recorded = archive["environment"].get("kernels_sha256", {}).get("traffic.py")
    for name, nbytes in result["bytes"].items():
        model = _byte_model(name)
        if isinstance(model, str):
            note = f"bytes of route {name} not recomputed: {model}"
            if note not in found.notes:
                found.notes.append(note)
            continue
        expected = inputs.call(model)
        if nbytes == expected:
            continue
        if recorded != env.kernel_hashes().get("traffic.py"):
            note = (f"bytes of route {name} differ from today's byte model, which changed "
                    "since the run (kernels/traffic.py): not counted as a problem")
            if note not in found.notes:
                found.notes.append(note)
        else:
            found.problems.append(f"{where}: bytes of route {name} are {nbytes}, its byte "
                                  f"model gives {expected}")


def _limits(archive: dict, p: dict, found: Findings) -> None:
    where = f"pass {p['index']} limits"
    limits = p["limits"]
    copy = limits["copy"]
    middle = median(copy["samples"])
    # The buffer's size is the harness's choice of the day (it was 1 GiB on 2026-12-02):
    # the same in every pass of a run.
    first = next(q["limits"]["copy"]["bytes"] for q in archive["passes"] if q.get("limits"))
    if copy["bytes"] != first:
        found.problems.append(f"{where}: copy bytes {copy['bytes']} differ from the run's "
                              f"first measurement ({first})")
    if not _close(copy["median_s"], middle):
        found.problems.append(f"{where}: copy median_s {copy['median_s']!r} is not the median "
                              f"of its samples ({middle!r})")
    if not _close(copy["gbps"], copy["bytes"] / middle / 1e9):
        found.problems.append(f"{where}: copy gbps {copy['gbps']!r} is not its bytes over its "
                              f"median ({copy['bytes'] / middle / 1e9!r})")
    sms = (archive["environment"].get("gpu") or {}).get("sms")
    for name, floor in limits["launch_floor"].items():
        if not _close(floor["median_s"], median(floor["samples"])):
            found.problems.append(f"{where}: launch_floor {name} median_s "
                                  f"{floor['median_s']!r} is not the median of its samples")
        programs = {"one_program": 1, "one_per_sm": sms}.get(name)
        if programs is not None and floor["programs"] != programs:
            found.problems.append(f"{where}: launch_floor {name} ran {floor['programs']} "
                                  f"programs, not {programs}")


def _close(a, b) -> bool:
    return (isinstance(a, (int, float)) and not isinstance(a, bool)
            and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300))


# -- summary ---------------------------------------------------------------------------------


def _differences(stored, recomputed, path: str = "summary") -> list[str]:
    """Every place where two JSON values differ (floats to 1e-12 relative)."""
    if isinstance(stored, dict) and isinstance(recomputed, dict):
        out = []
        for key in sorted(set(stored) | set(recomputed)):
            if key not in stored or key not in recomputed:
                out.append(f"{path}.{key}: present in only one")
            else:
                out += _differences(stored[key], recomputed[key], f"{path}.{key}")
        return out
    if isinstance(stored, list) and isinstance(recomputed, list):
        if len(stored) != len(recomputed):
            return [f"{path}: {len(stored)} entries stored, {len(recomputed)} recomputed"]
        return [d for i, (a, b) in enumerate(zip(stored, recomputed, strict=True))
                for d in _differences(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if (isinstance(stored, numbers) and isinstance(recomputed, numbers)
            and not isinstance(stored, bool) and not isinstance(recomputed, bool)):
        if math.isclose(stored, recomputed, rel_tol=1e-12, abs_tol=1e-300):
            return []
    elif type(stored) is type(recomputed) and stored == recomputed:  # False is not 0
        return []
    return [f"{path}: stored {stored!r}, recomputed {recomputed!r}"]
