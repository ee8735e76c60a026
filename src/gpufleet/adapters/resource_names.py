"""Names of the resources gpufleet creates at a provider, derived from an order's idempotency key.

``resource_name(key)``: the key made legal (lower case, letters, digits and hyphens, starting with a letter) plus 8
hex of its SHA-256, at most 59 characters: legal for Compute Engine (``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``) and for
Azure capacity reservations, stable, and distinct for two keys that read alike. The name is what makes a retry
find the first order.
"""

from __future__ import annotations

import hashlib
import re

_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def resource_name(key: str) -> str:
    legal = re.sub(r"[^a-z0-9-]+", "-", key.lower()).strip("-")
    if not legal or not legal[0].isalpha():
        legal = "gpufleet-" + legal
    name = f"{legal[:50].rstrip('-')}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
    assert _NAME.fullmatch(name), name
    return name
