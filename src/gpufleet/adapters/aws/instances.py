"""Instance launch/terminate for a node tier where Karpenter is not used (EC2 RunInstances / TerminateInstances).

The adapter reports outcomes; it does not decide. A launch that EC2 refuses for capacity returns
``LaunchOutcome(status="insufficient_capacity", reason="insufficient_capacity")``, which the placement chain
(:func:`gpufleet.place.launch.next_link`) turns into its next link.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.adapters.aws.errors import CAPACITY_CODES, call
from gpufleet.adapters.aws.session import AwsClients
from gpufleet.adapters.aws.skus import instance_type
from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout

TIER_TAG = "gpufleet:node-tier"
LaunchStatus = Literal["launched", "insufficient_capacity", "refused", "unknown"]


@dataclass(frozen=True, slots=True)
class LaunchOutcome:
    status: LaunchStatus
    instance_ids: tuple[str, ...] = ()
    reason: str = ""  # reason code for the chain: insufficient_capacity, provider_refused, no_answer
    provider_code: str = ""
    message: str = ""


class AwsNodeTier:
    """Whole instances of one SKU, tagged with the tier name, launched idempotently per ``client_token``."""

    def __init__(self, clients: AwsClients, *, tier: str, image_id: str, subnet_id: str | None = None) -> None:
        self._clients = clients
        self.tier = tier
        self._image_id = image_id
        self._subnet_id = subnet_id

    def launch(
        self,
        region: str,
        *,
        sku_id: str,
        count: int,
        client_token: str,
        zone: str | None = None,
        spot: bool = False,
    ) -> LaunchOutcome:
        it = instance_type(sku_id)
        params: dict[str, Any] = {
            "ImageId": self._image_id,
            "InstanceType": it.name,
            "MinCount": count,
            "MaxCount": count,
            "ClientToken": client_token,
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": TIER_TAG, "Value": self.tier}, {"Key": "gpufleet:sku", "Value": sku_id}],
                }
            ],
        }
        if self._subnet_id:
            params["SubnetId"] = self._subnet_id
        if zone:
            params["Placement"] = {"AvailabilityZone": zone}
        if spot:
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time"}}
        ec2 = self._clients.client("ec2", region)
        try:
            out = call("RunInstances", ec2.run_instances, **params)
        except ProviderRefused as exc:
            if exc.code in CAPACITY_CODES:
                return LaunchOutcome("insufficient_capacity", (), "insufficient_capacity", exc.code, exc.message)
            return LaunchOutcome("refused", (), "provider_refused", exc.code, exc.message)
        except ProviderTimeout as exc:
            return LaunchOutcome("unknown", (), "no_answer", "", str(exc))
        ids = tuple(str(i["InstanceId"]) for i in out.get("Instances", []))
        return LaunchOutcome("launched", ids)

    def terminate(self, region: str, instance_ids: list[str]) -> dict[str, str]:
        """Instance id -> its state after the call (``shutting-down`` or ``terminated``)."""
        if not instance_ids:
            return {}
        ec2 = self._clients.client("ec2", region)
        out = call("TerminateInstances", ec2.terminate_instances, InstanceIds=instance_ids)
        return {
            str(i["InstanceId"]): str(i.get("CurrentState", {}).get("Name", ""))
            for i in out.get("TerminatingInstances", [])
        }

    def running(self, region: str) -> list[str]:
        """Ids of this tier's pending or running instances."""
        ec2 = self._clients.client("ec2", region)
        filters = [
            {"Name": f"tag:{TIER_TAG}", "Values": [self.tier]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
        out = call("DescribeInstances", ec2.describe_instances, Filters=filters)
        return sorted(str(i["InstanceId"]) for r in out.get("Reservations", []) for i in r.get("Instances", []))
