"""Audit: recompute every summary of an archive from its raw samples and compare."""

import hashlib
import json
import math

from qkbench.archive import pass_digest
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


def audit(archive: dict) -> list[str]:
    """The problems found; an empty list means the archive is consistent."""
    problems = []
    text = archive["protocol"]["text"]
    if hashlib.sha256(text.encode()).hexdigest() != archive["protocol"]["sha256"]:
        problems.append("protocol: text does not match its sha256")
    for p in archive["passes"]:
        if p.get("digest") != pass_digest(p):
            problems.append(f"pass {p.get('index')}: raw content does not match its digest")
    recomputed = json.loads(json.dumps(summarize(archive)))
    problems += _differences(archive["summary"], recomputed)
    return problems
