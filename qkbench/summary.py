"""Every derived figure of a run, computed from its raw samples alone.

The runner stores ``summarize(archive)`` in the archive; ``audit`` recomputes it from the
raw passes and compares.
"""

from collections import defaultdict
from statistics import median

from qkbench import stats
from qkbench.protocol import Band


def _limits(passes: list[dict]) -> dict | None:
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


def _cell(key: str, entries: list[tuple[int, dict, dict]], threshold: float,
          copy_gbps: float | None) -> dict:
    """One (comparison, case) cell from its per-pass (index, case result, comparison)."""
    rows, invalid = [], []
    for index, case_result, comp in entries:
        if comp["status"] != "ok":
            invalid.append({"pass": index, "routes": comp.get("invalid_routes", [])})
            continue
        arms = {a["label"]: a["samples"] for a in comp["arms"]}
        rows.append({
            "pass": index,
            "null": stats.null_ratio(arms["A"], arms["A'"]),
            "delta": stats.delta_ratio(arms["B"], arms["A"], arms["A'"]),
            "baseline_s": stats.baseline_time(arms["A"], arms["A'"]),
            "candidate_s": median(arms["B"]),
            "copy_s": median(case_result["copy"]["samples"]),
        })
    for r in rows:
        r["kept"] = stats.kept(r["null"], threshold)
    effect = stats.effect([r["null"] for r in rows], [r["delta"] for r in rows], threshold)
    _, first, comp = entries[0]
    kept_rows = [r for r in rows if r["kept"]] or rows
    cell = {"key": key, "geometry": first["case"]["geometry"]["name"],
            "tokens": first["case"]["tokens"], "effect": effect.as_dict(), "passes": rows,
            "invalid_passes": invalid}
    if kept_rows:
        times = {"baseline": median(r["baseline_s"] for r in kept_rows),
                 "candidate": median(r["candidate_s"] for r in kept_rows),
                 "copy": median(r["copy_s"] for r in kept_rows)}
        nbytes = first["bytes"]
        cell["time_us"] = {k: v * 1e6 for k, v in times.items()}
        cell["bandwidth"] = {
            role: {"route_gbps": nbytes[route] / times[role] / 1e9,
                   "share_of_copy": (nbytes[route] / times[role] / 1e9 / copy_gbps
                                     if copy_gbps else None),
                   "vs_same_bytes_copy": times[role] / times["copy"]}
            for role, route in (("baseline", comp["baseline"]), ("candidate", comp["candidate"]))
        }
    return cell


def summarize(archive: dict) -> dict:
    resolved = archive["protocol"]["resolved"]
    threshold = resolved["timing"]["drop_threshold"]
    bands = [Band(**{**b, "geometries": tuple(b["geometries"]) if b.get("geometries") else None})
             for b in resolved["bands"]]
    passes = [p for p in archive["passes"] if p["status"] == "ok"]
    limits = _limits(passes)
    copy_gbps = limits["copy_gbps"] if limits else None

    # (baseline, candidate) -> case key -> [(pass index, case result, comparison)]
    cells: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for p in passes:
        for case_result in p["cases"]:
            for comp in case_result.get("comparisons", []):
                pair = (comp["baseline"], comp["candidate"])
                cells[pair][case_result["key"]].append((p["index"], case_result, comp))

    comparisons = []
    for pair, by_key in cells.items():
        summary = [_cell(key, entries, threshold, copy_gbps) for key, entries in by_key.items()]
        effects = {c["key"]: stats.Effect(**c["effect"]) for c in summary}
        by_geometry = defaultdict(list)
        for c in summary:
            by_geometry[c["geometry"]].append((c["tokens"], effects[c["key"]]))
        resolved_geoms = {g: [(t, e) for t, e in cs if e.median is not None]
                          for g, cs in by_geometry.items()}
        rows = [r for c in summary for r in c["passes"]]
        kept_nulls = [abs(r["null"]) for r in rows if r["kept"]]
        comparisons.append({
            "baseline": pair[0], "candidate": pair[1], "cases": summary,
            "bands": [{"name": b.name, **stats.band_summary(
                [effects[c["key"]] for c in summary if b.holds(c["geometry"], c["tokens"])])}
                for b in bands],
            "crossover": {g: stats.crossover(cs) for g, cs in by_geometry.items()},
            "dispatch_bound": stats.dispatch_bound(resolved_geoms, resolved["dispatch_margin"])
            if all(resolved_geoms.values()) else None,
            "drops": {"dropped": sum(not r["kept"] for r in rows), "total": len(rows)},
            "width": {"worst": max(kept_nulls) if kept_nulls else None,
                      "median": median(kept_nulls) if kept_nulls else None},
        })
    return {"limits": limits, "comparisons": comparisons,
            "passes": {"ok": len(passes), "failed": sum(p["status"] != "ok"
                                                        for p in archive["passes"])}}
