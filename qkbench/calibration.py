"""Calibration: the method proves itself on the machine at hand (SPEC 4, "Calibration").

Two runs of one protocol with one route: an A/A run (the route against itself under a
second name, ``NAME~twin``), where every verdict other than unresolved is a false one;
and a planted run (the route against itself plus one extra call of itself every N
launches, ``NAME+1/N``: +1/N of its own work), where each planted effect must be
resolved slower. ``summarize`` reads both archives' summaries; nothing here prints.
"""

from qkbench import env, routes
from qkbench.errors import ProtocolError, QkbenchError, RouteError
from qkbench.protocol import Protocol, measuring_timing
from qkbench.summary import current

# One extra call in 32 and in 8: +3.1 % and +12.5 % of the route's own work.
PLANTED_EVERY = (32, 8)


def default_planted(inner_reps: int) -> tuple[int, ...]:
    """``PLANTED_EVERY`` where both divide ``inner_reps`` (the shipped GPU protocols' 32);
    else one extra call a replay, and one a quarter replay where 4 divides it (the CPU's
    smoke protocol replays 2 launches: +50 %)."""
    if all(inner_reps % n == 0 for n in PLANTED_EVERY):
        return PLANTED_EVERY
    return (inner_reps, inner_reps // 4) if inner_reps % 4 == 0 else (inner_reps,)


VERDICTS = ("faster", "slower")


def protocols(protocol: Protocol, route: str, planted_every: tuple[int, ...]
              ) -> dict[str, Protocol]:
    """The A/A and the planted protocol: ``protocol`` with the routes replaced; a sweep of
    each makes the two archives ``summarize`` reads. Each N must divide ``inner_reps``, so
    that every graph replay (every sample) holds the same number of extra calls."""
    aa = protocol.with_overrides(routes=[route, routes.twin(route)])  # a bad route first
    uneven = [n for n in planted_every if protocol.timing.inner_reps % n]
    if uneven:
        raise ProtocolError(f"--planted {', '.join(map(str, uneven))}: must divide the "
                            f"protocol's inner_reps ({protocol.timing.inner_reps}), else a "
                            "replay would hold an uneven number of extra calls")
    return {"aa": aa,
            "planted": protocol.with_overrides(
                routes=[route, *(routes.planted(route, n) for n in planted_every)])}


def planted_share(every: int, input_sets: int, launches: int) -> float:
    """The extra work a planted route adds to a replay of ``launches`` launches: its call
    counter starts after one warm call per input set, and every ``every``-th call runs the
    op twice."""
    first, last = input_sets, input_sets + launches - 1
    return (last // every - (first - 1) // every) / launches


def _replays(archive: dict) -> dict[str, tuple[int, int]]:
    """Case key -> (input sets, launches per replay), as the passes recorded them."""
    return {c["key"]: (c["input_sets"], c["launches_per_replay"])
            for p in archive["passes"] for c in p.get("cases", []) if "input_sets" in c}


def _planted(name: str) -> bool:
    try:
        return routes.planted_every(name) is not None
    except RouteError:
        return False


def _route_of(kind: str, archive: dict) -> str:
    """The route an A/A (``kind`` "aa") or planted archive calibrates; a ``QkbenchError``
    where its routes are not such a run's."""
    names = list(archive["protocol"]["resolved"]["routes"])
    base, others = names[0], names[1:]
    if kind == "aa" and others == [routes.twin(base)]:
        return base
    if kind == "planted" and others and all(
            n.startswith(base + routes.PLANTED) and _planted(n) for n in others):
        return base
    option, what, want = {
        "aa": ("--aa", "an A/A", f"ROUTE against ROUTE{routes.TWIN}"),
        "planted": ("--planted-run", "a planted", f"ROUTE against ROUTE{routes.PLANTED}N")}[kind]
    raise QkbenchError(f"{option}: not {what} calibration archive (its routes are "
                       f"{', '.join(names)}; such a run times {want})")


def check_pair(aa: dict, planted: dict) -> None:
    """Refuse two archives that are not one calibration's A/A and planted runs: of one
    route, protocol text, set of cells, timing and machine, each finished."""
    route, planted_route = _route_of("aa", aa), _route_of("planted", planted)
    if route != planted_route:
        raise QkbenchError(f"--aa calibrates {route} and --planted-run {planted_route}: give "
                           "the two archives of one calibration")
    a, b = aa["protocol"], planted["protocol"]
    if a["sha256"] != b["sha256"] or any(a["resolved"][k] != b["resolved"][k]
                                         for k in ("tokens", "geometries")):
        raise QkbenchError("--aa and --planted-run ran different protocols or cells: give "
                           "the two archives of one calibration")
    for how, of in (("were timed differently", measuring_timing),
                    ("ran on different machines", lambda run: env.machine(run["environment"]))):
        a, b = of(aa), of(planted)
        if a != b:
            differ = ", ".join(f"{k} {a[k]} against {b[k]}" for k in a if a[k] != b[k])
            raise QkbenchError(f"--aa and --planted-run {how} ({differ}): give the two "
                               "archives of one calibration")
    for option, archive in (("--aa", aa), ("--planted-run", planted)):
        if archive["status"] != "complete":
            raise QkbenchError(f"{option}: the run is unfinished (status {archive['status']}): "
                               "finish it with qkbench sweep --resume first")
        if not current(archive):
            raise QkbenchError(f"{option}: the run has no summary yet: no pass has finished")


def summarize(aa: dict, planted: dict) -> dict:
    """Per case: the A/A verdict, each planted effect's size, estimate and verdict, and
    the smallest one resolved; and the totals a user reads last."""
    (aa_comp,) = current(aa)["comparisons"]
    aa_cells = {c["key"]: c for c in aa_comp["cases"]}
    cases = {key: {"key": key, "geometry": c["geometry"], "tokens": c["tokens"],
                   "aa": c["effect"], "planted": []} for key, c in aa_cells.items()}
    replays = _replays(planted)
    for comp in current(planted)["comparisons"]:
        every = routes.planted_every(comp["candidate"])
        for c in comp["cases"]:
            expected = planted_share(every, *replays[c["key"]]) if c["key"] in replays else None
            e = c["effect"]
            width = e["width"]
            cases.setdefault(c["key"], {"key": c["key"], "geometry": c["geometry"],
                                        "tokens": c["tokens"], "aa": None, "planted": []})
            cases[c["key"]]["planted"].append({
                "route": comp["candidate"], "nominal": 1.0 / every, "expected": expected,
                "estimate": e["estimate"], "verdict": e["verdict"], "width": width,
                "exceeds_width": None not in (width, expected) and expected > width})
    for case in cases.values():
        case["planted"].sort(key=lambda p: p["nominal"])
        resolved = [p["expected"] for p in case["planted"] if p["verdict"] == "slower"
                    and p["expected"] is not None]
        case["smallest_resolved"] = min(resolved) if resolved else None
    rows = list(cases.values())
    # A cell with no estimate (unstable, or its passes failed) could not be judged either
    # way: it is neither a false verdict nor a miss nor a resolved effect, and is counted
    # apart, on both sides alike.
    planted_all = [p for c in rows for p in c["planted"]]
    planted_cells = [p for p in planted_all if p["estimate"] is not None]
    beyond = [p for p in planted_cells if p["exceeds_width"]]
    judged = [c for c in rows if c["aa"] is not None and c["aa"]["estimate"] is not None]
    return {
        "route": aa_comp["baseline"],
        "cases": rows,
        "false_verdicts": sum(c["aa"]["verdict"] in VERDICTS for c in judged),
        "aa_cells": len(judged),
        "aa_unjudged": sum(c["aa"] is not None for c in rows) - len(judged),
        "planted_resolved": sum(p["verdict"] == "slower" for p in planted_cells),
        "planted_cells": len(planted_cells),
        "planted_unjudged": len(planted_all) - len(planted_cells),
        "wrong_sign": sum(p["verdict"] == "faster" for p in planted_cells),
        "resolved_beyond_width": sum(p["verdict"] == "slower" for p in beyond),
        "beyond_width": len(beyond),
        # Estimated, larger than the width, and still not resolved: the method missed it.
        "missed": sum(p["verdict"] not in VERDICTS for p in beyond),
    }


def summary_line(result: dict) -> str:
    """The one line a user reads last."""
    unjudged = [f"{result[k]} {what}" for k, what in (("aa_unjudged", "A/A"),
                                                      ("planted_unjudged", "planted"))
                if result[k]]
    return (f"calibrate {result['route']}: false verdicts {result['false_verdicts']}/"
            f"{result['aa_cells']}, planted effects resolved {result['planted_resolved']}/"
            f"{result['planted_cells']} ({result['resolved_beyond_width']}/"
            f"{result['beyond_width']} of those larger than their cell's width"
            + (f"; {result['wrong_sign']} with the wrong sign" if result["wrong_sign"] else "")
            + ")" + (f"; cells without an estimate: {', '.join(unjudged)}" if unjudged else ""))


def failures(result: dict) -> list[str]:
    """Why a calibration does not prove the method here (none: it does). A false verdict
    or a planted effect with the wrong sign is an error; so is a planted effect larger than
    its cell's width, estimated and still unresolved, an A/A or planted run with no cell
    judged, and a planted run that resolved none of its effects: each proves nothing."""
    reasons = []
    if result["false_verdicts"]:
        reasons.append(f"{result['false_verdicts']} false verdicts")
    if result["wrong_sign"]:
        reasons.append(f"{result['wrong_sign']} planted effects with the wrong sign")
    if result["missed"]:
        reasons.append(f"{result['missed']} planted effects larger than their cell's width "
                       "left unresolved")
    if not result["aa_cells"]:
        reasons.append("no A/A cell had an estimate, so none could be judged")
    if not result["planted_cells"]:
        reasons.append("no planted cell had an estimate, so none could be resolved")
    elif not result["planted_resolved"]:
        reasons.append("no planted effect was resolved, so the run showed no effect of "
                       "those sizes can be told from noise here")
    return reasons
