"""Azure's compute quotas of the GPU VM families (the cloud quota port, ``adapters/quota_port.py``), read from
Microsoft.Compute's usages of a location. Values are vCPUs.

Which quota bounds a SKU: on-demand, its VM family's regional vCPU quota (``standardNDSH100v5Family`` for
Standard_ND96isr_H100_v5, ``standardNDISRH200V5Family`` for the H200 size, ``standardNDAMSv4_A100Family`` for
Standard_ND96amsr_A100_v4; the names as public notes of subscriptions show them, compared without case or spaces, not
checked on a subscription here); spot, the location's one low-priority bucket ``lowPriorityCores``, shared by every
spot VM of every family. A family the location does not list, or lists without a limit of zero or more (absent,
negative: -1 is "unlimited" elsewhere), gives no reading: the stored quota applies to that pool. One GPU takes 12 vCPUs
(96 per 8-GPU VM).

Increases are not filed through gpufleet for Azure (Microsoft.Quota's request flow is not built): the outlook drafts
them, and a person files them in the portal's Quotas page; ``request_increase`` and ``request_status`` refuse
(``files_increases`` is False). Azure's usages carry no request history, so the lead time is ``increase_lead_days``.
"""

from __future__ import annotations

import math

from gpufleet.adapters.azure.session import ArmApi
from gpufleet.adapters.azure.vm_sizes import VM_SIZES
from gpufleet.adapters.providers import ProviderRefused
from gpufleet.adapters.quota_port import IncreaseRequest, QuotaReading, QuotaRef

SPOT_QUOTA = "lowPriorityCores"
FAMILIES: dict[str, str] = {
    "h100_80gb": "standardNDSH100v5Family",
    "h200_141gb": "standardNDISRH200V5Family",
    "a100_80gb": "standardNDAMSv4_A100Family",
}
VCPUS_PER_GPU = 12  # the ND96 sizes: 96 vCPUs, 8 GPUs


def _norm(name: str) -> str:
    return name.replace(" ", "").lower()


def _limit(value: object) -> float | None:
    """A usage's ``limit`` in vCPUs; None (no reading) when it is absent, not a number, or negative (-1: unlimited)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value < math.inf else None


class AzureComputeQuotas:
    provider = "azure"
    unit = "vCPU"
    files_increases = False

    def __init__(self, api: ArmApi) -> None:
        self._api = api
        self.regions = api.config.regions

    def quota_for(self, sku_id: str, tier: str) -> QuotaRef | None:
        if sku_id not in FAMILIES or tier not in ("on_demand", "spot"):
            return None
        code = FAMILIES[sku_id] if tier == "on_demand" else SPOT_QUOTA
        return QuotaRef(code, code, tier, self.unit, VCPUS_PER_GPU, VM_SIZES[sku_id].gpus)

    def read(self, region: str) -> list[QuotaReading]:
        usages = {
            _norm(str((u.get("name") or {}).get("value", ""))): u
            for u in self._api.pages("usage.list", f"locations/{region}/usages", scope="subscription")
        }
        wanted = [(code, sku, "on_demand") for sku, code in FAMILIES.items()] + [(SPOT_QUOTA, "", "spot")]
        out = []
        for code, sku, tier in wanted:
            u = usages.get(_norm(code))
            limit = None if u is None else _limit(u.get("limit"))
            if u is not None and limit is not None:
                name = str((u.get("name") or {}).get("localizedValue") or code)
                family = VM_SIZES[sku].name if sku else "all spot VMs"
                out.append(QuotaReading(region, code, name, family, tier, limit))
        return out

    def requests(self, region: str, code: str) -> list[IncreaseRequest]:
        return []

    def request_increase(self, region: str, code: str, desired_value: float, *, reason: str) -> IncreaseRequest:
        raise ProviderRefused("not_built", "file Azure quota increases in the portal's Quotas page (gpufleet drafts)")

    def request_status(self, region: str, request_id: str) -> IncreaseRequest:
        raise ProviderRefused("not_built", "Azure quota requests are followed in the portal's Quotas page")
