"""The cloud quota port: a provider's quotas that bound the on-demand and spot tiers of a GPU SKU, and increase
requests filed with the provider.

Each provider counts in its own unit: AWS's running-instance quotas count vCPUs per instance family (shared by
every SKU of the family), GCP's GPU quotas count GPUs per GPU model. A :class:`QuotaRef` says which quota a SKU's
tier counts against and how many of its units one GPU takes, so the service converts without knowing the
provider. Implementations: ``adapters/aws/quotas.py`` (Service Quotas), ``adapters/gcp/quotas.py`` (Cloud
Quotas) and ``adapters/azure/quotas.py`` (Microsoft.Compute usages, read only). Errors are the provider port's (:class:`~gpufleet.adapters.providers.ProviderTimeout`, ``ProviderRefused``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class QuotaRef:
    """The quota a SKU's tier counts against: ``code`` (the provider's id), its unit and the units of one GPU."""

    code: str
    name: str
    tier: str  # "on_demand" or "spot"
    unit: str  # "vCPU" or "GPU"
    units_per_gpu: int
    gpus_per_machine: int  # increases are drafted in whole machines (instances, VMs)

    def gpus(self, value: float) -> int:
        return int(value // self.units_per_gpu)


@dataclass(frozen=True, slots=True)
class QuotaReading:
    region: str
    code: str
    name: str
    family: str  # what shares the quota: AWS's instance family ("P", "G"), GCP's GPU model
    tier: str
    value: float  # in the quota's unit


@dataclass(frozen=True, slots=True)
class IncreaseRequest:
    """An increase filed with the provider. ``open``: still being decided. ``turnaround_s``: how long the provider
    took to decide it, when it is decided and the provider says when (None otherwise). ``declined``: decided, and
    the provider granted less than asked (AWS DENIED or NOT_APPROVED, GCP a granted value below the preferred)."""

    request_id: str
    region: str
    code: str
    desired_value: float
    status: str
    open: bool
    created_s: int | None
    updated_s: int | None
    turnaround_s: int | None = None
    declined: bool = False


class CloudQuotas(Protocol):
    provider: str
    unit: str
    regions: tuple[str, ...]
    files_increases: bool  # False: increases are drafted only (request_increase and request_status refuse)

    def quota_for(self, sku_id: str, tier: str) -> QuotaRef | None:
        """The quota the SKU's tier counts against (None: the provider sells the SKU on no such quota)."""

    def read(self, region: str) -> list[QuotaReading]:
        """The GPU quotas of one region (those the SKUs map to)."""

    def requests(self, region: str, code: str) -> list[IncreaseRequest]:
        """The quota's increase requests known to the provider, oldest first."""

    def request_increase(self, region: str, code: str, desired_value: float, *, reason: str) -> IncreaseRequest:
        """File an increase of one quota to ``desired_value`` (its unit)."""

    def request_status(self, region: str, request_id: str) -> IncreaseRequest:
        """One request as the provider reports it now."""
