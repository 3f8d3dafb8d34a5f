"""Before a case is timed: does every route compute the operation?

Routes of one exact group (the shipped split and fused kernels) must agree bit for bit (a
user route claiming their group is compared with them, never they with it); every route
must meet the FP64 oracle within the dtype's bound, in what it writes where the op says
(in place, or into the outputs it is given) in the storage dtype. A route that fails is
reported and never timed. A route that declares a case unsupported (``NotSupported``) is
recorded as ``{"ok": False, "unsupported": reason}``: not timed, and reported "n/s".
"""

from collections.abc import Sequence

import torch

from qkbench.accuracy import TOLERANCE, differing_share, oracle_error, within_tolerance
from qkbench.case import Inputs, fresh_copy
from qkbench.kernels import reference
from qkbench.routes import NotSupported, Route, shipped


def verify(routes: Sequence[Route], inputs: Inputs, inplace: bool) -> dict[str, dict]:
    """Per route: oracle errors, exactness against its group's reference (``group_reference``),
    and ``ok``. Each route is called as it is timed (in place, or into outputs given to
    it) and judged by what it wrote there."""
    oracle = inputs.call(reference.qk_norm_rope_oracle)
    outputs, report = {}, {}
    for route in routes:
        if route.name in report or route.name in outputs:
            continue
        run = inputs.with_qk(fresh_copy(inputs.q), fresh_copy(inputs.k))
        # Outputs the route must overwrite: NaN, so that one it leaves alone fails.
        outs = {} if inplace else {name: torch.full_like(x, float("nan")) for name, x in
                                   (("q_out", inputs.q), ("k_out", inputs.k))}
        try:
            _check_returned(run.call(route.op, inplace=inplace, **outs), inputs)
        except NotSupported as e:
            report[route.name] = {"ok": False, "unsupported": str(e)}
            continue
        except (Exception, SystemExit) as e:  # a route that raises (or calls sys.exit) is
            # a wrong route, reported as such, never the end of the run
            report[route.name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            continue
        outputs[route.name] = (run.q, run.k) if inplace else (outs["q_out"], outs["k_out"])
    for route in routes:
        if route.name not in outputs or route.name in report:
            continue
        errors = {name: oracle_error(out, ref)
                  for name, out, ref in zip("qk", outputs[route.name], oracle, strict=True)}
        worst, relative = TOLERANCE[inputs.q.dtype]
        entry = {"oracle": errors, "bound": {"worst": worst, "relative": relative},
                 "ok": all(within_tolerance(e, inputs.q.dtype) for e in errors.values())}
        head = group_reference(routes, route, outputs)
        if head is not None and head.name != route.name:
            shares = [differing_share(a, b) for a, b in
                      zip(outputs[route.name], outputs[head.name], strict=True)]
            entry["exact_with"] = head.name
            entry["differing_share"] = max(shares)
            entry["ok"] = entry["ok"] and max(shares) == 0.0
        report[route.name] = entry
    return report


def group_reference(routes: Sequence[Route], route: Route,
                    outputs: dict[str, object]) -> Route | None:
    """The route ``route`` is compared with bit for bit: the first shipped kernel route of
    its exact group that computed a result, else the group's first route that did (so a
    user route claiming the shipped kernels' group is judged against them, never they
    against it); None outside a group."""
    members = [r for r in routes if r.exact_group and r.exact_group == route.exact_group
               and r.name in outputs]
    return next((r for r in members if shipped(r.name)), members[0] if members else None)


def _check_returned(result: object, inputs: Inputs) -> None:
    """Refuse (a wrong route) a result that is not a pair of tensors shaped and typed as q
    and k."""
    if not (isinstance(result, Sequence) and len(result) == 2
            and all(isinstance(t, torch.Tensor) for t in result)):
        raise TypeError(f"a route returns its q and k outputs, a pair of tensors; got "
                        f"{type(result).__name__}")
    for name, out, x in zip("qk", result, (inputs.q, inputs.k), strict=True):
        if out.shape != x.shape:
            raise ValueError(f"its {name} output is shaped {tuple(out.shape)}, not as {name} "
                             f"{tuple(x.shape)}")
        if out.dtype != x.dtype:
            raise ValueError(f"its {name} output is {out.dtype}, not {name}'s {x.dtype}")


def status_word(check: dict) -> str:
    """A verification entry in one word: ``ok``, ``WRONG`` (fails the oracle or exactness,
    or raised), or ``n/s`` (the route does not support the case)."""
    if check["ok"]:
        return "ok"
    return "n/s" if "unsupported" in check else "WRONG"


def describe(check: dict) -> str:
    """A verification entry in words: its status word and what it rests on."""
    word = status_word(check)
    if "unsupported" in check:
        return f"{word} ({check['unsupported']})"
    if "error" in check:
        return f"{word} (raised {check['error']})"
    detail = f"oracle error {max(e['worst'] for e in check['oracle'].values()):.1e}"
    if "exact_with" in check:
        same = check["differing_share"] == 0
        detail += (f", bit-exact with {check['exact_with']}" if same else
                   f", NOT exact with {check['exact_with']} "
                   f"({check['differing_share']:.2%} of elements differ)")
    return f"{word} ({detail})"
