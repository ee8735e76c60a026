"""CreateCapacityReservation answered without the reservation's id is an unknown outcome, never an order id ""."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.adapters.aws.reservations import AwsCapacityReservations
from gpufleet.adapters.providers import OrderRequest, ProviderTimeout


class _Config:
    instance_platform = "Linux/UNIX"
    regions = ("us-east-1",)

    def zone(self, region: str) -> str:
        return f"{region}a"


class _Ec2:
    def create_capacity_reservation(self, **_: Any) -> dict[str, Any]:
        return {"CapacityReservation": {}}  # a 200 without the order (a proxy, a truncated answer)


class _Clients:
    config = _Config()

    def client(self, service: str, region: str) -> _Ec2:
        return _Ec2()


def test_an_answer_without_the_id_is_an_unknown_outcome() -> None:
    port = AwsCapacityReservations(_Clients(), now_s=lambda: 0)  # type: ignore[arg-type]
    with pytest.raises(ProviderTimeout):  # before: an order with id "", described never, submitted forever
        port.create("gpufleet-res_x", OrderRequest("h100_80gb", "us-east-1", 8, 1, 0))
