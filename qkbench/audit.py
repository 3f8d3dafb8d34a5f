"""Audit: recompute every summary of an archive from its raw samples and compare."""

import hashlib
import math

from qkbench import legacy
from qkbench.archive import as_stored, pass_digest, run_settings
from qkbench.errors import QkbenchError
from qkbench.protocol import rebuild
from qkbench.summary import summarize


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
    elif stored == recomputed:
        return []
    return [f"{path}: stored {stored!r}, recomputed {recomputed!r}"]


def _header_problems(archive: dict) -> list[str]:
    """Whether the resolved settings and the run's settings follow from the protocol text."""
    resolved = archive["protocol"]["resolved"]
    try:
        proto = rebuild(archive["protocol"])
    except (QkbenchError, KeyError, TypeError) as e:
        return [f"protocol: the resolved settings cannot be rebuilt from its text ({e})"]
    problems = []
    rebuilt = as_stored(proto.resolved())
    if archive.get("schema_version") == 1:  # its timing predates the settings added since
        rebuilt["timing"] = {k: v for k, v in rebuilt["timing"].items()
                             if k in resolved["timing"]}
    if rebuilt != resolved:
        problems.append("protocol: the resolved settings do not follow from its text and "
                        "the recorded routes and timing")
    settings = archive["settings"]
    expected = run_settings(proto, settings.get("device"))
    problems += [f"settings.{key}: {settings.get(key)!r} disagrees with the protocol's {value!r}"
                 for key, value in expected.items() if settings.get(key) != value]
    return problems


def audit(archive: dict) -> list[str]:
    """The problems found; an empty list means the archive is consistent."""
    problems = []
    text = archive["protocol"]["text"]
    if hashlib.sha256(text.encode()).hexdigest() != archive["protocol"]["sha256"]:
        problems.append("protocol: text does not match its sha256")
    problems += _header_problems(archive)
    for p in archive["passes"]:
        if p.get("digest") != pass_digest(p):
            problems.append(f"pass {p.get('index')}: raw content does not match its digest")
    rules = legacy.summarize if archive.get("schema_version") == 1 else summarize
    try:
        recomputed = as_stored(rules(archive))
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as e:
        return [*problems, f"summary: cannot be recomputed from the passes "
                           f"({type(e).__name__}: {e})"]
    problems += _differences(archive["summary"], recomputed)
    return problems
