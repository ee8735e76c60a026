"""Read a fleet spec (YAML): procurement's tiers, team quotas and namespaces -> Kueue/Karpenter objects.

```yaml
tiers:        # what procurement decided per (GPU product, tier): Karpenter NodePool limits
  - {sku: NVIDIA-H100-80GB-HBM3, tier: reserved, gpus: 64, instance_families: [p5]}
quotas:       # team quotas (schedule.quota.TeamQuota), per tier flavor
  - {team: research, cohort: ml, sku: NVIDIA-H100-80GB-HBM3, tier: reserved, nominal_gpus: 32,
     borrowing_limit_gpus: 16, lending_limit_gpus: 8}
namespaces: {research-jobs: research}   # namespace -> team (one LocalQueue each)
release: karpenter   # or gpufleet: the controller releases idle launched nodes (--release-every-s), Karpenter never
```
Errors name the entry and field (``quotas[2].nominal_gpus``) and the file, and come before anything is applied:
teams and cohorts become object names (DNS-1123 subdomains), namespaces must be DNS-1123 labels, a SKU a label
value (``nvidia.com/gpu.product``), a tier one of reserved, spot, on-demand. A field the spec does not know is refused
(a misspelt optional field would else change what is applied without a word), a ``lending_limit_gpus`` above the
entry's ``nominal_gpus`` (Kueue's webhook refuses ``lendingLimit > nominalQuota``), and two tiers that compile to
one ResourceFlavor and NodePool name (one (SKU, tier) twice, or two SKUs that differ only in case or in characters
a name cannot hold: applying would replace the first by the second) and a team's quota of one (SKU, tier) twice.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpufleet.adapters.inputs import read_input_text
from gpufleet.adapters.kubernetes.fleetobjects import (
    CHAIN,
    TierCapacity,
    flavor_name,
    karpenter_objects,
    kueue_objects,
)
from gpufleet.adapters.kubernetes.rest import JSON
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.quota import TeamQuota

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
NAME_RULES = {
    "team": (DNS_SUBDOMAIN, "an object name: lower-case letters, digits, '-' and '.', at most 253"),
    "cohort": (DNS_SUBDOMAIN, "an object name: lower-case letters, digits, '-' and '.', at most 253"),
    "sku": (LABEL_VALUE, "a label value: letters, digits, '-', '_' and '.', at most 63, alphanumeric at both ends"),
}


def _name(entry: dict[str, Any], key: str, where: str, path: Path) -> str:
    v: str = _get(entry, key, str, where, path)
    rule, what = NAME_RULES[key]
    if not rule.fullmatch(v):
        raise ValidationError(f"{where}.{key}", f"{v!r} is not {what}", str(path))
    return v


FIELDS = {
    "<root>": ("tiers", "quotas", "namespaces", "release"),
    "tiers": ("sku", "tier", "gpus", "instance_families"),
    "quotas": ("team", "cohort", "sku", "tier", "nominal_gpus", "borrowing_limit_gpus", "lending_limit_gpus"),
}


def _known(entry: dict[Any, Any], kind: str, where: str, path: Path) -> None:
    """Refuse a field of ``entry`` that a ``kind`` entry does not have (``where``: the entry's name in errors)."""
    for k in entry:
        if k not in FIELDS[kind]:
            field = str(k) if kind == "<root>" else f"{where}.{k}"
            raise ValidationError(field, f"unknown field; {kind} fields: {', '.join(FIELDS[kind])}", str(path))


def _entries(doc: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    got = doc.get(key) or []
    if not isinstance(got, list):
        raise ValidationError(key, "must be a list of mappings", str(path))
    for i, e in enumerate(got):
        if not isinstance(e, dict):
            raise ValidationError(f"{key}[{i}]", f"must be a mapping, got {e!r}", str(path))
        _known(e, key, f"{key}[{i}]", path)
    return got


def _tier(entry: dict[str, Any], where: str, path: Path) -> str:
    v: str = _get(entry, "tier", str, where, path)
    if v not in CHAIN:
        raise ValidationError(f"{where}.tier", f"{v!r}: choose one of {', '.join(CHAIN)}", str(path))
    return v


def _get(entry: dict[str, Any], key: str, kind: type, where: str, path: Path, default: Any = ...) -> Any:
    if key not in entry:
        if default is ...:
            raise ValidationError(f"{where}.{key}", "is required", str(path))
        return default
    v = entry[key]
    if kind is int and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
        raise ValidationError(f"{where}.{key}", f"must be an integer >= 0, got {v!r}", str(path))
    if kind is str and (not isinstance(v, str) or not v):
        raise ValidationError(f"{where}.{key}", f"must be a non-empty string, got {v!r}", str(path))
    return v


def load_fleet_spec(path: Path) -> list[JSON]:
    text = read_input_text(path)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError("yaml", str(exc).splitlines()[0], str(path)) from None
    if not isinstance(doc, dict):
        raise ValidationError("<root>", "expected a mapping with tiers, quotas, namespaces", str(path))
    _known(doc, "<root>", "", path)
    tiers = []
    named: dict[str, int] = {}  # flavor (ResourceFlavor and NodePool name) -> the tier entry that has it
    for i, t in enumerate(_entries(doc, "tiers", path)):
        w = f"tiers[{i}]"
        fams = t.get("instance_families", ["p5"])
        if not isinstance(fams, list) or not fams or not all(isinstance(f, str) and f for f in fams):
            raise ValidationError(f"{w}.instance_families", "must be a non-empty list of names", str(path))
        tier = TierCapacity(_name(t, "sku", w, path), _tier(t, w, path), _get(t, "gpus", int, w, path), tuple(fams))
        if tier.flavor in named:
            raise ValidationError(f"{w}.sku", f"{tier.sku!r} {tier.tier} compiles to the NodePool {tier.flavor!r} of "
                                  f"tiers[{named[tier.flavor]}]: one entry per (sku, tier)", str(path))  # fmt: skip
        named[tier.flavor] = i
        tiers.append(tier)
    quotas = []
    held: dict[tuple[str, str], int] = {}  # (team, flavor) -> the quota entry that has it
    for i, q in enumerate(_entries(doc, "quotas", path)):
        w = f"quotas[{i}]"
        flavor = flavor_name(_name(q, "sku", w, path), _tier(q, w, path))
        team = _name(q, "team", w, path)
        if (team, flavor) in held:
            raise ValidationError(w, f"team {team!r} has a quota of {flavor!r} already (quotas[{held[team, flavor]}])",
                                  str(path))  # fmt: skip
        held[(team, flavor)] = i
        nominal, lend = _get(q, "nominal_gpus", int, w, path), _get(q, "lending_limit_gpus", int, w, path, None)
        if lend is not None and lend > nominal:
            raise ValidationError(f"{w}.lending_limit_gpus", f"{lend} is above nominal_gpus {nominal}: a team lends at "
                                  "most its nominal quota (Kueue refuses lendingLimit > nominalQuota)", str(path))  # fmt: skip
        quotas.append(TeamQuota(
            team, _name(q, "cohort", w, path), flavor, nominal, _get(q, "borrowing_limit_gpus", int, w, path, None), lend,
        ))  # fmt: skip
    namespaces = doc.get("namespaces") or {}
    if not isinstance(namespaces, dict):
        raise ValidationError("namespaces", "must map namespace -> team", str(path))
    for ns, team in namespaces.items():
        if not isinstance(ns, str) or not DNS_LABEL.fullmatch(ns):
            raise ValidationError(f"namespaces[{ns}]", "a namespace is a DNS-1123 label (a-z, 0-9, '-', 63)", str(path))
        if not isinstance(team, str):
            raise ValidationError(f"namespaces[{ns}]", f"must name a team, got {team!r}", str(path))
    release = doc.get("release", "karpenter")
    if release not in ("karpenter", "gpufleet"):
        raise ValidationError("release", f"must be karpenter or gpufleet, got {release!r}", str(path))
    try:
        return kueue_objects(quotas, tiers, namespaces) + karpenter_objects(
            tiers, gpufleet_releases=release == "gpufleet"
        )
    except ValidationError as exc:
        raise ValidationError(exc.field, exc.message, str(path)) from None
