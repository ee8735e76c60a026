"""The AWS adapters over one set of clients (what the service wires when ``provider = aws``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.adapters.aws.capacity_blocks import AwsCapacityBlocks
from gpufleet.adapters.aws.prices import AwsPrices
from gpufleet.adapters.aws.quotas import AwsServiceQuotas
from gpufleet.adapters.aws.reservations import AwsCapacityReservations
from gpufleet.adapters.aws.session import AwsClients, AwsConfig, CallRecord


@dataclass(frozen=True, slots=True)
class AwsWorld:
    clients: AwsClients
    reservations: AwsCapacityReservations
    blocks: AwsCapacityBlocks
    quotas: AwsServiceQuotas
    prices: AwsPrices

    @property
    def config(self) -> AwsConfig:
        return self.clients.config


def aws_world(
    config: AwsConfig,
    *,
    now_s: Callable[[], int],
    on_dry_run: Callable[[CallRecord], None] | None = None,
    match_criteria: str = "open",
) -> AwsWorld:
    clients = AwsClients(config, on_dry_run=on_dry_run)
    return AwsWorld(
        clients,
        AwsCapacityReservations(clients, now_s=now_s, match_criteria=match_criteria),
        AwsCapacityBlocks(clients),
        AwsServiceQuotas(clients),
        AwsPrices(clients),
    )
