"""Every derived figure of a run, computed from its raw samples alone.

The runner stores ``summarize(archive)`` in the archive after every pass (and plans the
replacement passes from it); ``audit`` recomputes it from the raw passes and compares.

Each (comparison, case) cell has one *order slot* per primary pass. A slot is filled by
the first of its attempts -- the primary pass, then replacement passes with the same arm
order -- that the drop rule keeps. The filled slots form the balanced kept set: every arm
order equally often, so order and slot effects cancel for all arms alike (SPEC 4).

The width a verdict is read against is the worst disagreement of the identical arms in every
pass that measured the cell, kept or dropped (``stats.width_values``); archives of schema 3 and
before are summarised as they were made, by their kept passes' ``|null|`` alone
(``WIDTH_OF_EVERY_PASS``).
"""

import math
from collections import defaultdict
from statistics import median

from qkbench import stats
from qkbench.errors import ArchiveError
from qkbench.protocol import Band, rebuild
from qkbench.schedule import order_of

# Slot states: kept (filled), open (a replacement is due), pending (not yet measured),
# unstable (every attempt dropped or failed), invalid (a route is wrong there).
KEPT, OPEN, PENDING, UNSTABLE, INVALID = "kept", "open", "pending", "unstable", "invalid"
# A cell a route declared it does not support: no verdict, and not an error.
NOT_SUPPORTED = "n/s"
# The first archive schema whose widths count every measured pass, not the kept ones alone.
WIDTH_OF_EVERY_PASS = 4


def counts_every_pass(archive: dict) -> bool:
    """Whether an archive's widths count every measured pass (``stats.width_values``)."""
    return archive.get("schema_version", 0) >= WIDTH_OF_EVERY_PASS


def width_rule(archive: dict) -> str:
    """What an archive's widths are the worst of, in words."""
    if counts_every_pass(archive):
        return "worst max(A, A')/min(A, A') - 1 of every measured pass, dropped ones too"
    return "worst kept |null|"


def slot_of(p: dict) -> int:
    """The order slot a pass fills: its own index, or the one it replaces."""
    return p["index"] if p.get("replaces") is None else p["replaces"]


def limits_summary(passes: list[dict]) -> dict | None:
    """The device limits over the passes that measured them (medians)."""
    measured = [p["limits"] for p in passes if p.get("limits")]
    if not measured:
        return None
    floors = measured[0]["launch_floor"].keys()
    return {
        "copy_gbps": median(m["copy"]["gbps"] for m in measured),
        "copy_bytes": measured[0]["copy"]["bytes"],
        "launch_floor_us": {k: median(m["launch_floor"][k]["median_s"] for m in measured) * 1e6
                            for k in floors},
        "passes": len(measured),
    }


def times_and_bandwidth(rows: list[dict], nbytes: dict[str, int], pair: tuple[str, str],
                        copy_gbps: float | None) -> dict:
    """A cell's ``time_us`` and ``bandwidth`` from the rows its verdict used (medians):
    each route's rate on its own bytes, as a share of the device's copy and against the
    case's same-bytes copy; and the launch floor its comparisons ran beside, where every
    row timed one."""
    roles = ["baseline", "candidate", "copy"]
    if all(r.get("floor_s") is not None for r in rows):
        roles.append("floor")
    times = {role: median(r[f"{role}_s"] for r in rows) for role in roles}
    return {"time_us": {k: v * 1e6 for k, v in times.items()},
            "bandwidth": {
                role: {"route_gbps": nbytes[route] / times[role] / 1e9,
                       "share_of_copy": (nbytes[route] / times[role] / 1e9 / copy_gbps
                                         if copy_gbps else None),
                       "vs_same_bytes_copy": times[role] / times["copy"]}
                for role, route in zip(("baseline", "candidate"), pair, strict=True)}}


def telemetry_flags(arms: list[dict], clock_threshold: float) -> list[str]:
    """What the card did while each arm was timed that casts doubt on its samples."""
    flags = []
    for arm in arms:
        readings = arm.get("telemetry") or []
        clocks = [r["sm_clock_mhz"] for r in readings]
        if clocks and (max(clocks) - min(clocks)) / max(clocks) > clock_threshold:
            flags.append(f"{arm['label']}: SM clock moved {min(clocks)}-{max(clocks)} MHz")
        reasons = sorted({name for r in readings for name in r["throttle"]} - {"gpu_idle"})
        if reasons:
            flags.append(f"{arm['label']}: throttled ({', '.join(reasons)})")
    return flags


def _times(samples: list, what: str) -> list:
    """``samples`` where every one is a positive finite time; a ValueError naming ``what``
    otherwise (no clock gives NaN, an infinity or a time <= 0: an edited archive)."""
    bad = next((x for x in samples if not (math.isfinite(x) and x > 0)), None)
    if bad is not None:
        raise ValueError(f"{what} holds a sample that is not a positive finite time ({bad!r})")
    return samples


def _row(p: dict, case_result: dict, comp: dict, timing: dict) -> dict:
    """One measured attempt of a cell: its null, delta and the drop decision."""
    where = f"pass {p['index']} {case_result.get('key')}"
    arms = {a["label"]: _times(a["samples"], f"{where} arm {a['label']}") for a in comp["arms"]}
    null = stats.null_ratio(arms["A"], arms["A'"])
    flags = telemetry_flags(comp["arms"], timing.get("clock_threshold", 1.0))
    reason = None
    if not stats.kept(null, timing["drop_threshold"]):
        reason = "null"
    elif flags and timing.get("drop_throttled", False):
        reason = "throttled"
    return {
        "pass": p["index"], "slot": slot_of(p), "order": p["order"],
        "null": null, "delta": stats.delta_ratio(arms["B"], arms["A"], arms["A'"]),
        "baseline_s": stats.baseline_time(arms["A"], arms["A'"]),
        "candidate_s": median(arms["B"]),
        "copy_s": median(case_result["copy"]["samples"]),
        "slot_medians": [median(a["samples"]) for a in comp["arms"]],
        "kept": reason is None, "drop_reason": reason, "flags": flags,
        # Archives from before 2026-12-05 timed no floor: their rows keep their keys.
        **({"floor_s": median(comp["floor"]["samples"])} if "floor" in comp else {}),
    }


def _attempts(passes: list[dict], keys: list[str]) -> dict[tuple[str, int], list[tuple]]:
    """(case key, slot) -> every attempt in pass order: (pass, case result or None)."""
    out: dict[tuple[str, int], list[tuple]] = defaultdict(list)
    for p in sorted(passes, key=lambda p: p["index"]):
        if p["status"] == "ok":
            for case_result in p["cases"]:
                out[case_result["key"], slot_of(p)].append((p, case_result))
        else:  # a pass that died measured none of the cases it was asked for
            for key in p.get("case_keys") or keys:
                out[key, slot_of(p)].append((p, None))
    return out


def _slot(slot: int, attempts: list[tuple], pair: tuple[str, str], timing: dict,
          retries: int) -> tuple[dict, list[dict], dict | None, list[dict]]:
    """One slot of one cell: its record, its measured rows, the row that fills it (or
    None) and its invalid attempts."""
    rows, invalid, used, failed = [], [], None, 0
    for p, case_result in attempts:
        comp = None if case_result is None else next(
            (c for c in case_result.get("comparisons", [])
             if (c["baseline"], c["candidate"]) == pair), None)
        if comp is None:
            failed += 1
        elif comp["status"] != "ok":
            routes = comp.get("invalid_routes", [])
            # Unsupported only when every failing route declared it so: a wrong route beside
            # an unsupported one is still a wrong route.
            invalid.append({"pass": p["index"], "routes": routes,
                            "unsupported": bool(routes) and all(
                                r in comp.get("unsupported", {}) for r in routes)})
        else:
            row = _row(p, case_result, comp, timing)
            rows.append(row)
            if used is None and row["kept"]:
                used = row
    if invalid:
        status = INVALID
    elif used is not None:
        status = KEPT
    elif not attempts:
        status = PENDING
    elif len(attempts) <= retries:
        status = OPEN
    else:
        status = UNSTABLE
    record = {"slot": slot, "order": list(order_of(slot)), "status": status,
              "attempts": len(attempts), "failed": failed,
              "used": None if used is None else used["pass"]}
    return record, rows, used, invalid


def _cell(case, pair: tuple[str, str], attempts: dict, timing: dict, retries: int,
          copy_gbps: float | None, every_pass: bool) -> tuple[dict, stats.Effect]:
    slots, rows, used, invalid = [], [], [], []
    for slot in range(timing["passes"]):
        record, slot_rows, row, bad = _slot(slot, attempts.get((case.key, slot), []), pair,
                                            timing, retries)
        slots.append(record)
        rows += slot_rows
        invalid += bad
        if row is not None:
            used.append(row)
    statuses = {s["status"] for s in slots}
    unstable = [" ".join(s["order"]) for s in slots if s["status"] == UNSTABLE]
    state = (NOT_SUPPORTED if invalid and all(i["unsupported"] for i in invalid) else
             INVALID + " route" if INVALID in statuses else
             UNSTABLE if unstable else
             PENDING if statuses & {OPEN, PENDING} else None)
    effect = stats.effect([r["null"] for r in used], [r["delta"] for r in used],
                          timing["passes"], state, unstable,
                          [r["null"] for r in rows] if every_pass else None)
    cell = {"key": case.key, "geometry": case.geometry.name, "tokens": case.tokens,
            "effect": effect.as_dict(), "slots": slots, "passes": rows,
            "invalid_passes": invalid,
            "slot_effect": stats.slot_effect([r["slot_medians"] for r in used])
            if effect.estimate is not None else None}
    if effect.estimate is not None:
        # From a measured attempt: a case that ran out of memory holds an error, no bytes.
        nbytes = next(r for slot in range(timing["passes"])
                      for _, r in attempts.get((case.key, slot), [])
                      if r and "error" not in r)["bytes"]
        cell.update(times_and_bandwidth(used, nbytes, pair, copy_gbps))
    return cell, effect


def _comparison(pair: tuple[str, str], cases: list, attempts: dict, timing: dict,
                retries: int, bands: list[Band], margin: float,
                copy_gbps: float | None, every_pass: bool) -> dict:
    cells = [_cell(case, pair, attempts, timing, retries, copy_gbps, every_pass)
             for case in cases]
    summary = [c for c, _ in cells]
    effects = {c["key"]: e for c, e in cells}
    by_geometry = defaultdict(list)
    for c in summary:
        by_geometry[c["geometry"]].append((c["tokens"], effects[c["key"]]))
    rows = [r for c in summary for r in c["passes"]]
    used = {(c["key"], s["used"]) for c in summary for s in c["slots"]
            if c["effect"]["estimate"] is not None}
    used_rows = [r for c in summary for r in c["passes"] if (c["key"], r["pass"]) in used]
    # The comparison's width, by its cells' rule over the cells with an estimate.
    nulls = stats.width_values(
        [r["null"] for r in used_rows],
        [r["null"] for c in summary if c["effect"]["estimate"] is not None
         for r in c["passes"]] if every_pass else None)
    width = max(nulls) if nulls else None
    slot = stats.slot_effect([r["slot_medians"] for r in used_rows])
    return {
        "baseline": pair[0], "candidate": pair[1], "cases": summary,
        "bands": [{"name": b.name, **stats.band_summary(
            [effects[c["key"]] for c in summary if b.holds(c["geometry"], c["tokens"])])}
            for b in bands],
        "crossover": {g: stats.crossover(cs) for g, cs in by_geometry.items()},
        "dispatch_bound": stats.dispatch_bound(by_geometry, margin),
        "drops": {"dropped": sum(not r["kept"] for r in rows), "total": len(rows),
                  "replacements": sum(s["attempts"] - 1 for c in summary for s in c["slots"]
                                      if s["attempts"] > 1),
                  "unstable": sum(effects[k].verdict == UNSTABLE for k in effects)},
        "width": {"worst": width, "median": median(nulls) if nulls else None},
        "slot_effect": {"estimate": slot,
                        "beyond_width": None if slot is None or width is None
                        else abs(slot) > width},
        "flagged_rows": sum(bool(r["flags"]) for r in rows),
    }


def summarize(archive: dict) -> dict:
    proto = rebuild(archive["protocol"])
    timing = archive["protocol"]["resolved"]["timing"]
    # Schema 1 runs had no replacement passes: a dropped slot was final.
    retries = timing.get("retries", 0)
    passes = archive["passes"]
    ok = [p for p in passes if p["status"] == "ok"]
    limits = limits_summary(ok)
    cases = proto.cases()
    attempts = _attempts(passes, [c.key for c in cases])
    every_pass = counts_every_pass(archive)
    comparisons = [
        _comparison((proto.baseline, cand), cases, attempts, timing, retries,
                    list(proto.bands), proto.dispatch_margin,
                    limits["copy_gbps"] if limits else None, every_pass)
        for cand in proto.candidates]
    return {"limits": limits, "comparisons": comparisons,
            "passes": {"ok": len(ok), "failed": len(passes) - len(ok),
                       "replacements": sum(p.get("replaces") is not None for p in passes)}}


def wrong_routes(archive: dict) -> dict[tuple[str, str, str], dict[str, int]]:
    """(baseline, candidate, case key) -> {route: the first pass that found it computing a
    wrong result or failing to run there}; a route that declared the case unsupported is
    not wrong."""
    out: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
    for p in sorted(archive["passes"], key=lambda p: p["index"]):
        for case in p.get("cases") or []:  # a pass that died holds none
            for comp in case.get("comparisons", []):
                for route in comp.get("invalid_routes", []):
                    if route not in comp.get("unsupported", {}):
                        out[comp["baseline"], comp["candidate"], case["key"]].setdefault(
                            route, p["index"])
    return dict(out)


# What a malformed pass or case raises in the rules below, read as "malformed archive".
MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError,
             OverflowError)


def current(archive: dict) -> dict | None:
    """The summary to show or judge: the passes summarised by today's rules, whatever the
    stored summary says (that one is for ``audit`` to check); None before the first pass.
    A pass too malformed to summarise raises ArchiveError."""
    if not archive["passes"]:
        return None
    try:
        return summarize(archive)
    except MALFORMED as e:
        raise ArchiveError(f"malformed archive: its summary cannot be recomputed from its "
                           f"passes ({type(e).__name__}: {e})") from None


def open_slots(summary: dict) -> dict[int, list[str]]:
    """Slot -> the case keys a replacement pass for that slot must measure."""
    need: dict[int, set[str]] = defaultdict(set)
    for comp in summary["comparisons"]:
        for cell in comp["cases"]:
            for s in cell["slots"]:
                if s["status"] == OPEN:
                    need[s["slot"]].add(cell["key"])
    return {slot: sorted(keys) for slot, keys in sorted(need.items())}


def used_rows(cell: dict) -> list[dict]:
    """The per-pass rows of a summary cell's balanced kept set (one per order slot): a
    pass that measured the cell again after its slot was filled is kept but not among them."""
    used = {s["used"] for s in cell["slots"]} - {None}
    return [r for r in cell["passes"] if r["pass"] in used]
