"""Review (cloud4): Azure's ``find(key)`` adopts the capacity reservation under gpufleet's name whose ``gpufleet-key``
tag is the key. Tags are writable by anyone with tag rights on the resource group, and a reservation of that name can
be made by anyone who can create one there: one in another region, of another VM size or VM count, is not the order
approved (AWS's and GCP's ``find`` check what is held)."""

from __future__ import annotations

import pytest

from gpufleet.adapters.providers import ProviderRefused
from tests.integration.azure.fake_azure import FakeAzure
from tests.integration.azure.test_azure_adapter import Clock, _order, _port

KEY = "gpufleet-res_spoof1"


@pytest.mark.parametrize("planted", [{"region": "westus3"}, {"gpus": 32}, {"sku": "a100_80gb"}])
def test_review_a_reservation_under_the_name_that_is_not_the_order_is_not_adopted(
    fake_azure: FakeAzure, planted: dict[str, object]
) -> None:
    """Review (fixed), the defect: a reservation under gpufleet's name carrying the key (here made through the adapter
    with another order's region, VM count or SKU, as anyone could make it) was recorded as the order: no capacity bought
    where and as approved. Expected: a ``blocked`` ``name_taken`` refusal naming what differs, held for a person."""
    port = _port(fake_azure, Clock(fake_azure))
    port.submit(KEY, _order(**planted))  # type: ignore[arg-type]
    with pytest.raises(ProviderRefused) as refused:
        port.submit(KEY, _order())
    assert refused.value.code == "name_taken" and refused.value.blocked, refused.value


def test_review_the_order_itself_is_still_found(fake_azure: FakeAzure) -> None:
    """Review (holds): the order gpufleet placed is found on a retry, nothing bought twice."""
    port = _port(fake_azure, Clock(fake_azure))
    first = port.submit(KEY, _order())
    assert port.submit(KEY, _order()) == first
    assert len(fake_azure.reservations) == 1
