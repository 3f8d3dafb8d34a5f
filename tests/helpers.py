"""What the tests share: kernel-output comparisons, archive edits, the scripts as modules."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

from qkbench.accuracy import TOLERANCE, differing_share, oracle_error, within_tolerance
from qkbench.kernels import reference


def assert_bit_identical(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    share = differing_share(a, b)
    assert share == 0.0, f"{what}: {share:.3%} of elements differ in their bits"


def assert_matches_oracle(out: torch.Tensor, oracle: torch.Tensor, what: str = "") -> None:
    error = oracle_error(out, oracle)
    assert within_tolerance(error, out.dtype), f"{what}: {error} (bounds {TOLERANCE[out.dtype]})"


def out_of_place(op, inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """``op``'s outputs for ``inputs``, written into fresh tensors."""
    q_out, k_out = torch.empty_like(inputs.q), torch.empty_like(inputs.k)
    return inputs.call(op, inplace=False, q_out=q_out, k_out=k_out)


def oracle_of(inputs) -> tuple[torch.Tensor, torch.Tensor]:
    return inputs.call(reference.qk_norm_rope_oracle)


def reseal(run: dict, key: bytes | None = None) -> dict:
    """What a careful editor does after an edit: recompute every pass digest and the
    header's seal (unkeyed unless given a key), so that only consistency can catch it."""
    from qkbench import seal

    for p in run["passes"]:
        p["digest"] = seal.pass_digest(p, key)
    seal.seal(run, key)
    return run


def primary_and_replacements(run: dict) -> tuple[list[dict], list[dict]]:
    """A run's primary passes (one per order slot, in slot order) and the replacement
    passes after them. A real clock on a loaded machine can drop a pass even past a loose
    threshold, and replacing it is right: tests timing with it allow replacements."""
    slots = run["protocol"]["resolved"]["timing"]["passes"]
    passes = run["passes"]
    assert [p["index"] for p in passes] == list(range(len(passes)))
    primary, replacements = passes[:slots], passes[slots:]
    assert [p["replaces"] for p in primary] == [None] * slots
    assert all(p["replaces"] is not None for p in replacements)
    return primary, replacements


def assert_usage_error(result, *fragments: str) -> str:
    """Exit 2 (a usage or input error), one ``error:`` line on stderr holding each
    fragment, no traceback; returns the line."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


SCRIPTS = Path(__file__).parent.parent / "scripts"


def script(name: str):
    """``scripts/NAME.py`` loaded as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def from_a_shell_without_the_interpreter_set(*args: str) -> subprocess.CompletedProcess:
    """The CLI run as a user runs it: a fresh process, TRITON_INTERPRET unset. Triton reads
    it as it compiles a kernel's decorator, so the CLI must not import the kernels before
    --device is known; run in process they would otherwise be built for a GPU driver that
    is not there."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", "from qkbench.cli import app; app()", *args],
                          env=env, capture_output=True, text=True, timeout=600)
