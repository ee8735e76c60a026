"""Compute Engine's GPU quotas through the Cloud Quotas API (the cloud quota port, ``adapters/quota_port.py``).

Which quota bounds a SKU (counted in GPUs, per project and region):
- on-demand H100, H200 and B200: ``GPUS-PER-GPU-FAMILY-per-project-region`` with the dimension ``gpu_family``
  (``NVIDIA_H100``, ...); these models have no quota of their own;
- on-demand A100 80GB and L4: their own ``NVIDIA-A100-80GB-GPUS-per-project-region``,
  ``NVIDIA-L4-GPUS-per-project-region``;
- spot (preemptible): ``PREEMPTIBLE-NVIDIA-<MODEL>-GPUS-per-project-region``.
A quota the project does not show (``quotaInfos.get`` answers NOT_FOUND) gives no reading: the stored quota
applies to that pool. The project-wide ceiling ``GPUS-ALL-REGIONS-per-project`` (GPUs in use in every region and of
every model) is read too and listed (tier ``all``) by ``GET /v1/quotas``, as a warning; it is not applied to a pool
(which GPUs count against it, spot among them or not, is not confirmed here).

Reading (``quotaInfos.get``): a quota's ``dimensionsInfos`` rows each hold the value for a set of dimensions; a
dimension absent from a row means every value without a row of its own, and a row without ``region`` applies to
the regions in its ``applicableLocations``. The value of a region (and GPU family) is the matching row that names
the most dimensions. A value of -1 (unlimited) gives no reading, nor does an answer that is not as documented (rows
or dimensions that are not objects, a value that is not an integer, a row without ``details``): that quota keeps
its stored value, and filing against it is refused (``bad_answer``, retryable).

Increases are quota preferences (``quotaPreferences``): filed only when the quota, read at that moment (not from a
cache), is limited and below the desired value (an unlimited quota, -1, is never turned into a limit); one preference
per quota and set of dimensions, declarative
(the preferred value, then Google's decision: ``reconciling`` until decided, then ``grantedValue``). Filing one
gets gpufleet's preference by its id (``gpufleet-<sku>-<tier>-<region>-<6 hex>``) and patches it with its etag, or
creates it; a preference of the same quota and dimensions made elsewhere (the console) is found by listing and
patched instead. Filing is idempotent (the same value again changes nothing), except after Google declined the
preference (granted less than preferred): filing then asks again, the preference patched to the value asked (the
outlook never does this by itself, a person does: reason ``declined``). Whether Google evaluates the very value it
declined anew is not documented; if the answer is still declined, filing is a conflict (409) saying so. Google requires a contact email on an
increase (``GPUFLEET_GCP_QUOTA_CONTACT_EMAIL``); without it nothing is sent. A preference is updated in place, so
its times do not tell how long one request took: ``turnaround_s`` is None and the outlook uses
``increase_lead_days``.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from gpufleet.adapters.gcp.machines import MACHINE_TYPES
from gpufleet.adapters.gcp.reservations import epoch_s
from gpufleet.adapters.gcp.session import GoogleApi
from gpufleet.adapters.http_retry import Pages
from gpufleet.adapters.providers import ProviderRefused
from gpufleet.adapters.quota_port import IncreaseRequest, QuotaReading, QuotaRef
from gpufleet.domain.errors import ConflictError, ValidationError

log = logging.getLogger(__name__)

SERVICE = "compute.googleapis.com"
FAMILY_QUOTA = "GPUS-PER-GPU-FAMILY-per-project-region"
GLOBAL_QUOTA = "GPUS-ALL-REGIONS-per-project"  # every GPU VM of the project, every region and model
TIERS = ("on_demand", "spot")
PREFERENCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.~-]{0,62}")


@dataclass(frozen=True, slots=True)
class GpuModel:
    token: str  # in per-model quota ids: NVIDIA-<token>-GPUS-per-project-region
    family: str  # the gpu_family dimension
    own_quota: bool  # on-demand has a quota of its own (else the family quota)


MODELS: dict[str, GpuModel] = {
    "b200": GpuModel("B200", "NVIDIA_B200", False),
    "h200_141gb": GpuModel("H200", "NVIDIA_H200", False),
    "h100_80gb": GpuModel("H100", "NVIDIA_H100", False),
    "a100_80gb": GpuModel("A100-80GB", "NVIDIA_A100_80GB", True),
    "l4": GpuModel("L4", "NVIDIA_L4", True),
}


@dataclass(frozen=True, slots=True)
class GpuQuota:
    quota_id: str
    family: str | None  # the gpu_family dimension, for the family quota

    @property
    def code(self) -> str:
        return self.quota_id if self.family is None else f"{self.quota_id}:{self.family}"

    def dimensions(self, region: str) -> dict[str, str]:
        return {"region": region} | ({} if self.family is None else {"gpu_family": self.family})


def gpu_quota(sku_id: str, tier: str) -> GpuQuota | None:
    m = MODELS.get(sku_id)
    if m is None or tier not in TIERS:
        return None
    if tier == "spot":
        return GpuQuota(f"PREEMPTIBLE-NVIDIA-{m.token}-GPUS-per-project-region", None)
    if m.own_quota:
        return GpuQuota(f"NVIDIA-{m.token}-GPUS-per-project-region", None)
    return GpuQuota(FAMILY_QUOTA, m.family)


QUOTA_BY_CODE: dict[str, tuple[str, GpuQuota]] = {
    q.code: (tier, q) for sku in MODELS for tier in TIERS if (q := gpu_quota(sku, tier)) is not None
}


class GarbledQuota(ValueError):
    """A quotaInfos answer that is not as Cloud Quotas documents it (rows or dimensions that are not objects, a value
    that is not an integer, a row without details): no reading is taken from it."""


_INT = re.compile(r"-?[0-9]{1,18}")


def _rows(info: dict[str, Any]) -> list[tuple[dict[str, str], list[str], int]]:
    """The answer's dimensionsInfos as (dimensions, applicable locations, value); :class:`GarbledQuota` when a part
    is not what Cloud Quotas sends. proto3 JSON leaves defaults out: no rows, no dimensions, a value of 0 (``details``
    ``{}``); int64 values come as strings."""
    rows = info.get("dimensionsInfos")
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise GarbledQuota(f"dimensionsInfos is not a list: {str(rows)[:80]!r}")
    out = []
    for row in rows:
        if not isinstance(row, dict):
            raise GarbledQuota(f"a dimensionsInfos row is not an object: {str(row)[:80]!r}")
        dims, where, details = row.get("dimensions") or {}, row.get("applicableLocations") or [], row.get("details")
        if not isinstance(dims, dict) or not all(isinstance(v, str) for v in dims.values()):
            raise GarbledQuota(f"dimensions is not an object of strings: {str(dims)[:80]!r}")
        if not isinstance(where, list):
            raise GarbledQuota(f"applicableLocations is not a list: {str(where)[:80]!r}")
        if not isinstance(details, dict):
            raise GarbledQuota(f"a row without details: {str(row)[:80]!r}")
        value = details.get("value", 0)
        if isinstance(value, str) and _INT.fullmatch(value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise GarbledQuota(f"details.value is not an integer: {str(value)[:80]!r}")
        out.append((dims, where, value))
    return out


def region_value(info: dict[str, Any], region: str, family: str | None) -> int | None:
    """The quota's value for ``region`` (and ``family``) from its dimensionsInfos (module docstring); None when no
    row applies or the quota is unlimited (-1); :class:`GarbledQuota` for an answer that cannot be read."""
    value = _row_value(info, region, family)
    return None if value is None or value < 0 else value


def _row_value(info: dict[str, Any], region: str, family: str | None) -> int | None:
    """The value of the most specific matching row, -1 (unlimited) included; None when no row applies."""
    want = {"region": region} | ({} if family is None else {"gpu_family": family})
    best: tuple[int, int] | None = None
    for dims, where, value in _rows(info):
        if any(want.get(k) != v for k, v in dims.items()):
            continue
        if "region" not in dims and where and region not in where:
            continue
        if best is None or len(dims) > best[0]:
            best = (len(dims), value)
    return None if best is None else best[1]


def _global_value(info: dict[str, Any]) -> int | None:
    """The project-wide quota's value: its row without dimensions; None when it has none or is unlimited."""
    rows = [value for dims, _where, value in _rows(info) if not dims]
    value = rows[0] if rows else None
    return None if value is None or value < 0 else value


def preference_id(sku_id: str, tier: str, region: str, code: str) -> str:
    digest = hashlib.sha256(code.encode()).hexdigest()[:6]
    return f"gpufleet-{sku_id.replace('_', '-')}-{tier.replace('_', '-')}-{region}-{digest}"


class GcpCloudQuotas:
    provider = "gcp"
    unit = "GPU"
    files_increases = True

    def __init__(self, api: GoogleApi, *, contact_email: str | None) -> None:
        self._api = api
        self._email = contact_email
        self.regions = api.config.regions

    def quota_for(self, sku_id: str, tier: str) -> QuotaRef | None:
        q = gpu_quota(sku_id, tier)
        if q is None:
            return None
        return QuotaRef(q.code, q.quota_id, tier, self.unit, 1, MACHINE_TYPES[sku_id].gpus)

    def read(self, region: str) -> list[QuotaReading]:
        infos: dict[str, dict[str, Any] | None] = {}
        out = []
        for code, (tier, q) in QUOTA_BY_CODE.items():
            if q.quota_id not in infos:
                path = f"locations/global/services/{SERVICE}/quotaInfos/{q.quota_id}"
                infos[q.quota_id] = self._api.get("quotaInfos.get", path)
            info = infos[q.quota_id]
            try:
                value = None if info is None else region_value(info, region, q.family)
            except GarbledQuota as exc:  # that quota's answer cannot be read: no reading, the stored quota applies
                log.warning("GCP quota %s in %s not read: %s", q.quota_id, region, exc)
                value = None
            if value is not None:
                family = q.family or q.quota_id.removeprefix("PREEMPTIBLE-").removesuffix("-GPUS-per-project-region")
                out.append(QuotaReading(region, code, q.quota_id, family, tier, float(value)))
        info = self._api.get("quotaInfos.get", f"locations/global/services/{SERVICE}/quotaInfos/{GLOBAL_QUOTA}")
        try:
            total = None if info is None else _global_value(info)
        except GarbledQuota as exc:
            log.warning("GCP quota %s not read: %s", GLOBAL_QUOTA, exc)
            total = None
        if total is not None:  # the project's ceiling over every region and model: listed, not applied to a pool
            out.append(QuotaReading(region, GLOBAL_QUOTA, GLOBAL_QUOTA, "every GPU, every region", "all", float(total)))
        return out

    def requests(self, region: str, code: str) -> list[IncreaseRequest]:
        """The one preference of this quota in this region, if any (a preference is the quota's only request); none
        for the project-wide ceiling, which gpufleet lists but does not file for."""
        if code not in QUOTA_BY_CODE:
            return []
        q = _known(code)[1]
        pref = self._preference_of(q, region)
        return [] if pref is None else [_request(pref, region, code)]

    def request_increase(self, region: str, code: str, desired_value: float, *, reason: str) -> IncreaseRequest:
        tier, q = _known(code)
        if not self._email:
            raise ValidationError(
                "gcp_quota_contact_email", "Google requires a contact email on a quota increase; set it to file one"
            )
        info = self._api.get("quotaInfos.get", f"locations/global/services/{SERVICE}/quotaInfos/{q.quota_id}")
        try:
            now = None if info is None else _row_value(info, region, q.family)
        except GarbledQuota as exc:  # never filed against a value that could not be read
            raise ProviderRefused("bad_answer", f"quotaInfos.get {q.quota_id}: {exc}", retryable=True) from None
        if now is None or now < 0 or now >= desired_value:  # read now, not from a cache: never lower a quota
            what = "no such quota here" if now is None else "unlimited" if now < 0 else f"already {now}"
            raise ValidationError("desired_gpus", f"{code} in {region}: {what}; {desired_value:g} would not raise it")
        sku = next(s for s in MODELS if gpu_quota(s, tier) == q)
        pid = preference_id(sku, tier, region, code)
        prefs = "locations/global/quotaPreferences"
        body: dict[str, Any] = {
            "service": SERVICE,
            "quotaId": q.quota_id,
            "dimensions": q.dimensions(region),
            "quotaConfig": {"preferredValue": str(int(desired_value))},
            "justification": f"gpufleet quota outlook ({reason})",
            "contactEmail": self._email,
        }
        pref = self._api.get("quotaPreferences.get", f"{prefs}/{pid}")
        if pref is None:
            try:
                got = self._api.call(
                    "quotaPreferences.create", "POST", prefs, params={"quotaPreferenceId": pid}, body=body
                )
                return _request(got, region, code)
            except ProviderRefused as exc:
                if exc.code not in ("ALREADY_EXISTS", "alreadyExists"):
                    raise
            # ours, created by an attempt whose answer was lost, or one made elsewhere for the same dimensions
            pref = self._preference_of(q, region)
            if pref is None:
                raise ProviderRefused("ALREADY_EXISTS", f"quota preference of {code} in {region}", retryable=True)
        attempt = 0
        while True:  # a patch refused ABORTED (changed since read) is read and tried once more
            attempt += 1
            asks = float((pref.get("quotaConfig") or {}).get("preferredValue", 0))
            if asks >= desired_value and not _request(pref, region, code).declined:
                return _request(pref, region, code)  # it already asks for as much: never lower a preference
            name = str(pref["name"]).rsplit("/", 1)[-1]
            patch = {k: body[k] for k in ("quotaConfig", "justification", "contactEmail")}
            # the path names it (Google answers names with the project number; the path has our project id)
            patch |= {k: pref[k] for k in ("service", "quotaId", "dimensions", "etag") if k in pref}
            try:
                got = self._api.call(
                    "quotaPreferences.patch",
                    "PATCH",
                    f"{prefs}/{name}",
                    params={"updateMask": "quotaConfig.preferredValue,justification,contactEmail"},
                    body=patch,
                )
                filed = _request(got, region, code)
                if filed.declined:  # Google took the patch but not as a new request (the same value again)
                    raise ConflictError(
                        f"Google declined {code} in {region} at {filed.desired_value:g} and did not take the same "
                        "value as a new request: ask a different value, or ask Google in the console"
                    )
                return filed
            except ProviderRefused as exc:  # ABORTED: changed since it was read (or our lost answer): read again
                if exc.code != "ABORTED" or attempt == 2:
                    raise
                pref = self._api.get("quotaPreferences.get", f"{prefs}/{name}") or pref

    def request_status(self, region: str, request_id: str) -> IncreaseRequest:
        if not PREFERENCE_ID.fullmatch(request_id):  # it becomes a path segment
            raise ValidationError("request_id", f"not a quota preference id: {request_id!r}")
        pref = self._api.get("quotaPreferences.get", f"locations/global/quotaPreferences/{request_id}")
        if pref is None:
            raise ValidationError("request_id", f"no quota preference {request_id!r} in the project")
        q = _quota_of(pref)  # the preference's own region, whichever configured region was asked
        return _request(pref, str((pref.get("dimensions") or {}).get("region") or region), "" if q is None else q.code)

    def _preference_of(self, q: GpuQuota, region: str) -> dict[str, Any] | None:
        """The preference of quota ``q`` with exactly the dimensions of ``region`` (list, every page)."""
        want = q.dimensions(region)
        token = ""
        guard = Pages("quotaPreferences.list")
        while True:
            params = {"pageSize": "100"} | ({"pageToken": guard.next(token)} if token else {})
            page = self._api.call("quotaPreferences.list", "GET", "locations/global/quotaPreferences", params=params)
            for pref in page.get("quotaPreferences") or []:
                same = pref.get("service") == SERVICE and pref.get("quotaId") == q.quota_id
                if same and (pref.get("dimensions") or {}) == want:
                    return dict(pref)
            token = str(page.get("nextPageToken") or "")
            if not token:
                return None


def _known(code: str) -> tuple[str, GpuQuota]:
    try:
        return QUOTA_BY_CODE[code]
    except KeyError:
        raise ValueError(f"unknown GPU quota {code!r}") from None


def _quota_of(pref: dict[str, Any]) -> GpuQuota | None:
    family = (pref.get("dimensions") or {}).get("gpu_family")
    for _tier, q in QUOTA_BY_CODE.values():
        if q.quota_id == pref.get("quotaId") and q.family == family:
            return q
    return None


def _epoch_s(stamp: Any) -> int | None:
    return epoch_s(str(stamp)) if stamp else None


def _request(pref: dict[str, Any], region: str, code: str) -> IncreaseRequest:
    config = pref.get("quotaConfig") or {}
    preferred = float(config.get("preferredValue", 0))
    granted = config.get("grantedValue")
    if pref.get("reconciling"):
        status = "RECONCILING"
    elif granted is None or float(granted) >= preferred:
        status = "GRANTED"
    else:
        status = "NOT_GRANTED"
    return IncreaseRequest(
        str(pref.get("name", "")).rsplit("/", 1)[-1],
        region,
        code,
        preferred,
        status,
        status == "RECONCILING",
        _epoch_s(pref.get("createTime")),
        _epoch_s(pref.get("updateTime")),
        declined=status == "NOT_GRANTED",
    )
