"""One pass: every case of a protocol, each comparison's three arms, measured in one process.

Run by the manager (``runner``) as ``python -m qkbench.worker JOB.json RESULT.json`` for
a fresh process per pass, or called in process. It returns raw samples only; every
statistic is derived later from what it wrote.
"""

import json
import os
import sys
import time
from collections.abc import Callable
from math import ceil

import torch

from qkbench import schedule
from qkbench.backends import Backend, backend_for
from qkbench.case import DTYPES, Case, Inputs, fresh_copy, make_inputs
from qkbench.protocol import Protocol, parse
from qkbench.routes import Route, resolve
from qkbench.verify import verify

PROGRESS = "qkbench-progress"


def protocol_of(job: dict) -> Protocol:
    overrides = dict(job.get("overrides", {}))
    return parse(job["protocol_text"], job["protocol_path"]).with_overrides(**overrides)


# A bound on the rotating input sets of a cold-cache case (each one launch per replay).
MAX_COLD_SETS = 16384


def _qk_bytes(inputs: Inputs) -> int:
    """The bytes of one input set's q and k rows."""
    return sum(x.numel() * x.element_size() for x in (inputs.q, inputs.k))


def _input_sets(case: Case, seed: int, backend: Backend, cold: bool) -> list[Inputs]:
    """One input set; or, for a cold cache, enough copies of its q and k that one replay
    sweeps through twice the backend's L2 before any row comes round again."""
    first = make_inputs(case, seed, backend.device)
    count = cold_sets(backend, _qk_bytes(first)) if cold else 1
    return [first] + [first.with_qk(fresh_copy(first.q), fresh_copy(first.k))
                      for _ in range(1, count)]


def cold_sets(backend: Backend, set_bytes: int) -> int:
    """How many buffer sets of ``set_bytes`` each a replay must cycle through so that it
    sweeps twice the backend's L2 before any set comes round again (1 without an L2; at
    most ``MAX_COLD_SETS``, where sets so small sweep less)."""
    if not backend.l2_bytes:
        return 1
    return min(MAX_COLD_SETS, max(1, ceil(2 * backend.l2_bytes / max(1, set_bytes))))


def _launches_per_replay(p: Protocol, input_sets: list[Inputs]) -> int:
    """``inner_reps``, or more so that a replay touches every rotating input set."""
    return max(p.timing.inner_reps, len(input_sets))


def _plans(case: Case, device: torch.device) -> dict:
    from qkbench.kernels.fused import fused_plans
    from qkbench.kernels.split import split_plans

    g = case.geometry
    args = (case.tokens, g.heads_q, g.heads_k, g.head_dim, g.rotary, device,
            DTYPES[case.dtype].itemsize)
    return {"fused": [p.as_dict() for p in fused_plans(*args)],
            "fused-pdl": [p.as_dict() for p in fused_plans(*args, pdl=True)],
            "split": [p.as_dict() for p in split_plans(*args)]}


def _telemetry_within(readings: list[dict], lo: int, hi: int) -> list[dict]:
    """The readings that bracket the samples at sequence positions ``[lo, hi)``."""
    before = [r for r in readings if r["after_sample"] <= lo][-1:]
    return before + [r for r in readings if lo < r["after_sample"] <= hi]


def _compare(backend: Backend, routes: dict[str, Route], input_sets: list[Inputs],
             inplace: bool, order: tuple[str, ...], p: Protocol, reps: int,
             placement_seed: int) -> dict:
    """Time the three arms of one comparison in ``order`` under the protocol's schedule,
    then the launch floor in the launch state they ran in."""
    from qkbench.limits import empty_launch

    t = p.timing
    # The launch floor is timed after the arms, in the launch state they ran in (see
    # ``Timing.launch_state``): its buffer is allocated and its graph captured before they
    # are timed, so nothing comes between.
    floor = empty_launch(backend.device)
    floor()
    prime = _primer(backend, p)
    placement = schedule.Placement(placement_seed, order, backend.device)
    launches = {}
    for label in placement.order:  # a random order of its own, not the sampling order
        placement.pad(label)
        launches[label] = routes[label].launches(input_sets, inplace, placement.empty_like)
        for launch in launches[label]:
            launch()
    prepared = [backend.prepare(launches[label], reps, label) for label in order]
    floor_arm = backend.prepare([floor], t.inner_reps, "floor")
    plan = schedule.sample_plan(len(order), t.warmup, t.samples, t.schedule, t.chunk)
    prime()
    timed = backend.run(prepared, plan.arms, plan.sync_after)
    per_arm = schedule.split_by_arm(timed.seconds, plan, len(order))
    arms = []
    for i, label in enumerate(order):
        positions = [n for n, a in enumerate(plan.arms) if a == i]
        warmup, samples = per_arm[i]
        arms.append({
            "label": label, "route": routes[label].name, "warmup": warmup, "samples": samples,
            "telemetry": _telemetry_within(timed.telemetry, positions[0], positions[-1] + 1)
            if timed.telemetry else [],
        })
    return {"baseline": routes["A"].name, "candidate": routes["B"].name, "status": "ok",
            "placement": placement.record(), "arms": arms,
            "floor": {"programs": 1, "launches_per_replay": t.inner_reps,
                      "samples": _reference_samples(backend, floor_arm, p)}}


def _primer(backend: Backend, p: Protocol) -> Callable[[], None]:
    """What puts the device in the protocol's launch state right before arms are timed:
    an empty kernel launched with PDL, then a synchronisation ("pdl"), or nothing. Made
    (its buffer allocated, compiled, launched once) when called, so that nothing of it is
    allocated between the priming and the timing."""
    if p.timing.launch_state == "as-found":
        return lambda: None
    from qkbench.limits import empty_launch

    launch = empty_launch(backend.device, pdl=True)
    launch()

    def prime() -> None:
        launch()
        backend.synchronize()
    return prime


def _reference_samples(backend: Backend, arm: object, p: Protocol) -> list[float]:
    """The timed samples of one prepared reference arm under the protocol's sample plan."""
    t = p.timing
    plan = schedule.sample_plan(1, t.warmup, t.samples, t.schedule, t.chunk)
    seconds = backend.run([arm], plan.arms, plan.sync_after).seconds
    return schedule.split_by_arm(seconds, plan, 1)[0][1]


def _copy_reference(backend: Backend, input_sets: list[Inputs], p: Protocol,
                    reps: int) -> dict:
    """A same-bytes ``copy_`` of q and k: what moving this case's rows once costs."""
    pairs = [(inputs, torch.empty_like(inputs.q), torch.empty_like(inputs.k))
             for inputs in input_sets]

    def make(inputs: Inputs, q: torch.Tensor, k: torch.Tensor) -> Callable[[], None]:
        def launch() -> None:
            q.copy_(inputs.q)
            k.copy_(inputs.k)
        return launch

    launches = [make(*pair) for pair in pairs]
    for launch in launches:
        launch()
    prime = _primer(backend, p)
    arm = backend.prepare(launches, reps, "copy")
    prime()
    return {"bytes": 2 * _qk_bytes(input_sets[0]),
            "samples": _reference_samples(backend, arm, p)}


def run_case(backend: Backend, p: Protocol, case: Case, case_index: int, pass_index: int,
             order: tuple[str, ...]) -> dict:
    t = p.timing
    seed = schedule.placement_seed(t.seed, pass_index, case_index)
    # Within torch's seeds (64 signed bits) whatever the protocol's seed; the same seed as
    # before for any seed below 2^63 / 100003.
    input_seed = (t.seed * 100_003 + case_index) % 2**63
    input_sets = _input_sets(case, input_seed, backend, t.cache == "cold")
    reps = _launches_per_replay(p, input_sets)
    inplace = case.geometry.inplace
    baseline = resolve(p.baseline)
    candidates = [resolve(name) for name in p.candidates]
    checks = verify([baseline, *candidates], input_sets[0], inplace)
    result = {"key": case.key, "case": case.as_dict(), "placement_seed": seed,
              "input_sets": len(input_sets), "input_set_bytes": _qk_bytes(input_sets[0]),
              "launches_per_replay": reps, "verification": checks,
              "plans": _plans(case, backend.device),
              "bytes": {r.name: r.bytes_moved(input_sets[0]) for r in (baseline, *candidates)},
              "comparisons": []}
    for i, cand in enumerate(candidates):
        bad = [r.name for r in (baseline, cand) if not checks[r.name]["ok"]]
        if bad:
            result["comparisons"].append({"baseline": baseline.name, "candidate": cand.name,
                                          "status": "invalid", "invalid_routes": bad,
                                          "unsupported": {name: checks[name]["unsupported"]
                                                          for name in bad
                                                          if "unsupported" in checks[name]}})
            continue
        routes = {"A": baseline, "B": cand, "A'": baseline}
        result["comparisons"].append(
            _compare(backend, routes, input_sets, inplace, order, p, reps, seed + i))
    result["copy"] = _copy_reference(backend, input_sets, p, reps)
    return result


def run_pass(job: dict, backend: Backend | None = None,
             progress: Callable[[int, int], None] | None = None) -> dict:
    """Measure one pass described by ``job``; returns its raw result."""
    from qkbench import env, limits

    p = protocol_of(job)
    backend = backend or backend_for(torch.device(job["device"]))
    order = tuple(job["order"])
    wanted = job.get("case_keys")
    started = time.time()
    cases = [(i, c) for i, c in enumerate(p.cases()) if wanted is None or c.key in wanted]
    results = []
    for done, (i, case) in enumerate(cases, 1):
        try:
            results.append(run_case(backend, p, case, i, job["index"], order))
        except torch.cuda.OutOfMemoryError as e:
            results.append({"key": case.key, "case": case.as_dict(), "error": str(e)})
        if backend.device.type == "cuda":
            torch.cuda.empty_cache()
        if progress:
            progress(done, len(cases))
    return {**pass_header(job), "pid": os.getpid(), "status": "ok",
            "code": env.code_now(),
            "started": started, "finished": time.time(),
            "limits": limits.measure(backend, p.timing.inner_reps, prime=_primer(backend, p))
            if job.get("measure_limits", True) else None,
            "cases": results}


def pass_header(job: dict) -> dict:
    """What every pass record says of the job it ran: index, order, what it replaces."""
    return {"index": job["index"], "order": list(job["order"]), "replaces": job.get("replaces"),
            "case_keys": job.get("case_keys")}


def main(argv: list[str]) -> int:
    job_path, result_path = argv
    with open(job_path) as f:
        job = json.load(f)

    def progress(done: int, total: int) -> None:
        print(f"{PROGRESS} {done} {total}", file=sys.stderr, flush=True)

    result = run_pass(job, progress=progress)
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
