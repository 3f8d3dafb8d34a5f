"""Digests of an archive: what ``audit`` checks the header and every pass against.

Each pass carries a digest of its raw content; the archive's ``seal`` carries a digest of
its header (schema version, kind, created, command, status, protocol, settings,
environment, resumes) and of the list of pass digests, so that an edited, deleted or
duplicated pass or header field no longer matches. Digests are taken over canonical JSON
(sorted keys, fixed separators), so re-indenting a file changes none of them.

Without a key the digests are plain SHA-256: they catch careless edits, and anyone can
recompute them after a careful one. With ``QKBENCH_SIGNING_KEY`` set (a secret that CI
holds) they are HMAC-SHA256: only a holder of the key can make them, so ``audit`` with
the key verifies the archive's origin as well as its consistency.
"""

import hashlib
import hmac
import json
import os

KEY_ENV = "QKBENCH_SIGNING_KEY"
SHA256 = "sha256"
HMAC_SHA256 = "hmac-sha256"
ALGORITHMS = (SHA256, HMAC_SHA256)
# The top-level keys the header digest covers (with the list of pass digests).
HEADER_KEYS = ("schema_version", "kind", "created", "command", "status", "protocol",
               "settings", "environment", "resumed", "gate")


def signing_key() -> bytes | None:
    """The key in ``QKBENCH_SIGNING_KEY``, or None where it is unset or empty."""
    value = os.environ.get(KEY_ENV)
    return value.encode() if value else None


def key_id(key: bytes) -> str:
    """A short public name of a key, so audit can say an archive was signed with another."""
    return hashlib.sha256(b"qkbench key id\0" + key).hexdigest()[:16]


def is_signed(archive: dict) -> bool:
    """Whether ``archive``'s seal says it was signed with a key (HMAC), not only digested."""
    return (archive.get("seal") or {}).get("algorithm") == HMAC_SHA256


def algorithm(key: bytes | None) -> str:
    return SHA256 if key is None else HMAC_SHA256


def canonical(value) -> bytes:
    """``value`` (as read back from JSON) as canonical bytes: sorted keys, one fixed
    layout, so the same for any indentation of the file (the form every schema used)."""
    return json.dumps(value, sort_keys=True).encode()


def digest(value, key: bytes | None) -> str:
    data = canonical(value)
    if key is None:
        return hashlib.sha256(data).hexdigest()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def pass_body(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "digest"}


def pass_digest(result: dict, key: bytes | None = None) -> str:
    """The digest of a pass's raw content (everything but the digest itself)."""
    return digest(pass_body(result), key)


def header_body(archive: dict) -> dict:
    body = {k: archive.get(k) for k in HEADER_KEYS}
    body["passes"] = [p.get("digest") for p in archive.get("passes", [])]
    return body


def seal(archive: dict, key: bytes | None) -> dict:
    """Set (and return) the archive's seal: the header digest and how it was made."""
    archive["seal"] = {"algorithm": algorithm(key),
                       "key_id": None if key is None else key_id(key),
                       "header": digest(header_body(archive), key)}
    return archive["seal"]


def verify(expected: str | None, actual: str) -> bool:
    return isinstance(expected, str) and hmac.compare_digest(expected, actual)
