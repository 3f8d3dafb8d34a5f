"""``qkbench gate --against REF``: REF's kernels and the working tree's, measured in one run.

One sweep per requested route (``fused`` by default): baseline ``ROUTE@<sha12>`` (REF's
kernels, exported by ``refs.exported``), candidate ``ROUTE`` (the working tree's, i.e. the
installed ``qkbench.kernels``), null arm ``ROUTE@<sha12>`` again, so that the regression
verdict has every protection of the method against drift, order and placement. Each sweep
writes its own archive, whose header records both commits and both kernels' source hashes
under ``gate``.
"""

import subprocess
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

import torch

from qkbench import env, refs, runner
from qkbench.archive import SUFFIX
from qkbench.protocol import Protocol


def candidate_record() -> dict:
    """The working tree's side of a gate: its commit, dirty flag and kernel hashes."""
    code = env.code_identity()
    return {"commit": code["commit"], "dirty": code["dirty"],
            "kernels": str(resources.files("qkbench.kernels")),
            "kernels_sha256": env.kernel_hashes()}


def installed_differs(repo: Path) -> str | None:
    """A warning when the installed kernels (the candidate) are not the ones in ``repo``'s
    working tree (e.g. a non-editable install of another checkout)."""
    try:
        top = subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    folder = Path(top.stdout.strip(), "kernels")
    if top.returncode != 0 or not folder.is_dir():
        return None
    if refs.source_hashes(folder) == env.kernel_hashes():
        return None
    return (f"note: the candidate is the installed qkbench.kernels "
            f"({resources.files('qkbench.kernels')}), whose sources differ from {folder}")


def archive_name(protocol: str, route: str, stamp: str) -> str:
    return f"{stamp}-gate-{protocol}-{route}{SUFFIX}"


def run(export: refs.Export, protocol: Protocol, routes: Sequence[str], device: torch.device,
        out_dir: Path, *, command: list[str] | None = None,
        events_for: Callable[[Protocol], runner.Events] | None = None,
        starting: Callable[[Path], None] | None = None) -> list[tuple[Path, dict]]:
    """Sweep ``protocol`` once per route, REF's route against the working tree's; returns
    each archive's path and content. ``events_for`` makes a sweep's events (progress);
    ``starting`` hears each archive's path before its sweep starts."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    header = {"gate": {"against": export.record(), "candidate": candidate_record()}}

    def sweep(proto: Protocol, path: Path) -> tuple[Path, dict]:
        """One route's sweep, and the archive's path: ``path``, or the next free name."""
        events = events_for(proto) if events_for else runner.Events()
        used = [path]

        def named(chosen: Path) -> None:
            used[0] = chosen
            if starting:
                starting(chosen)

        events.archive_named = named
        archive = runner.sweep(proto, device, path, command=command, events=events,
                               header=header, fresh_name=True)
        return used[0], archive

    return [sweep(protocol.with_overrides(routes=[export.route(route), route]),
                  out_dir / archive_name(protocol.name, route, stamp)) for route in routes]
