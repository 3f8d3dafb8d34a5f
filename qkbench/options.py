"""Command-line options that several commands share, as typer ``Annotated`` aliases.

A module of its own because ``cli`` imports ``gate_cli`` while it loads: both read these.
"""

from types import SimpleNamespace
from typing import Annotated

import typer

from qkbench.errors import ProtocolError, QkbenchError

# The command-line option that sets each setting an override error can name.
OPTIONS = {"'routes'": "--route", "'tokens'": "--tokens", "'geometries'": "--geometry",
           "'timing.drop_threshold'": "--threshold",
           **{f"'timing.{name}'": "--" + name.replace("_", "-")
              for name in ("passes", "warmup", "samples", "inner_reps", "schedule",
                           "isolation", "cache", "launch_state", "pass_timeout")}}


def timing(suffix: str) -> SimpleNamespace:
    """The sweep's timing overrides, each help ending in ``suffix`` (what the default is)."""

    def option(kind: type, text: str):
        return Annotated[kind | None, typer.Option(help=f"{text} {suffix}")]

    return SimpleNamespace(
        passes=option(int, "passes, a multiple of 6 (arm orders rotate)"),
        warmup=option(int, "warm-up samples per arm, timed and discarded"),
        samples=option(int, "timed samples per arm in each pass"),
        inner_reps=option(int, "launches per graph replay"),
        schedule=option(str, "interleaved or blocked"),
        isolation=option(str, "process (a fresh process per pass) or inprocess"),
        threshold=option(float, "drop a (pass, case) whose |null| exceeds this share"),
        cache=option(str, "hot or cold"),
        launch_state=option(str, "as-found, or pdl: an empty PDL launch before each "
                                 "comparison's arms are timed, the state a PDL arm leaves"),
        pass_timeout=option(float, "seconds a pass's worker process may run (start-up "
                                   "included) before it is ended and the pass recorded failed "
                                   "('timed out after N s') and replaced; in-process passes "
                                   "(--isolation inprocess) cannot be timed out (the shipped "
                                   "protocols' 1800)"),
    )


def cells(suffix: str) -> SimpleNamespace:
    """The options that pick a protocol's cells, each help ending in ``suffix``."""
    return SimpleNamespace(
        tokens=Annotated[list[int] | None, typer.Option(
            "--tokens", help=f"repeat: token counts to run instead of the protocol's {suffix}",
            show_default=False)],
        geometry=Annotated[list[str] | None, typer.Option(
            "--geometry", help="repeat: the only geometries to run, by the protocol's names "
                               f"for them {suffix}", show_default=False)],
    )


def refuse_given(options: dict[str, object], only_with: str) -> None:
    """Refuse those of ``options`` (its name -> its value, None where not given) that were
    given, naming them: they go only with ``only_with``."""
    given = [name for name, value in options.items() if value is not None]
    if given:
        raise QkbenchError(f"{', '.join(given)} {'go' if len(given) > 1 else 'goes'} only "
                           f"with {only_with}")


def overridden(protocol, **overrides):
    """``protocol.with_overrides(**overrides)`` (the command line's), an error naming the
    option that set what it names (``--threshold`` for ``timing.drop_threshold``)."""
    try:
        return protocol.with_overrides(**overrides)
    except ProtocolError as e:
        text = str(e).removeprefix("overrides: ")
        for key, option in OPTIONS.items():
            text = text.replace(key, option)
        raise ProtocolError(text) from None
