"""Before a case is timed: does every route compute the operation?

Routes of one exact group (the shipped split and fused kernels) must agree bit for bit;
every route must meet the FP64 oracle within the dtype's bound. A route that fails is
reported and never timed. A route that declares a case unsupported (``NotSupported``) is
recorded as ``{"ok": False, "unsupported": reason}``: not timed, and reported "n/s".
"""

from collections.abc import Sequence

import torch

from qkbench.accuracy import TOLERANCE, differing_share, oracle_error, within_tolerance
from qkbench.case import Inputs, fresh_copy
from qkbench.kernels import reference
from qkbench.routes import NotSupported, Route


def verify(routes: Sequence[Route], inputs: Inputs, inplace: bool) -> dict[str, dict]:
    """Per route: oracle errors, exactness against its group's first route, and ``ok``."""
    oracle = inputs.call(reference.qk_norm_rope_oracle)
    outputs, report = {}, {}
    for route in routes:
        if route.name in report:
            continue
        run = inputs.with_qk(fresh_copy(inputs.q), fresh_copy(inputs.k))
        try:
            outputs[route.name] = _outputs(run.call(route.op, inplace=inplace), inputs)
        except NotSupported as e:
            report[route.name] = {"ok": False, "unsupported": str(e)}
            continue
        except (Exception, SystemExit) as e:  # a route that raises (or calls sys.exit) is
            # a wrong route, reported as such, never the end of the run
            report[route.name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            continue
        errors = {name: oracle_error(out, ref)
                  for name, out, ref in zip("qk", outputs[route.name], oracle, strict=True)}
        worst, relative = TOLERANCE[inputs.q.dtype]
        entry = {"oracle": errors, "bound": {"worst": worst, "relative": relative},
                 "ok": all(within_tolerance(e, inputs.q.dtype) for e in errors.values())}
        group_head = next((r for r in routes if r.exact_group and
                           r.exact_group == route.exact_group and r.name in outputs), None)
        if group_head is not None and group_head.name != route.name:
            shares = [differing_share(a, b) for a, b in
                      zip(outputs[route.name], outputs[group_head.name], strict=True)]
            entry["exact_with"] = group_head.name
            entry["differing_share"] = max(shares)
            entry["ok"] = entry["ok"] and max(shares) == 0.0
        report[route.name] = entry
    return report


def _outputs(result: object, inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """A route's result as its q and k outputs, refused (a wrong route) where it is not a
    pair of tensors shaped as q and k."""
    if not (isinstance(result, Sequence) and len(result) == 2
            and all(isinstance(t, torch.Tensor) for t in result)):
        raise TypeError(f"a route returns its q and k outputs, a pair of tensors; got "
                        f"{type(result).__name__}")
    for name, out, x in zip("qk", result, (inputs.q, inputs.k), strict=True):
        if out.shape != x.shape:
            raise ValueError(f"its {name} output is shaped {tuple(out.shape)}, not as {name} "
                             f"{tuple(x.shape)}")
    return result[0], result[1]


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
