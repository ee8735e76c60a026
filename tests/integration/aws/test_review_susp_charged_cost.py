"""Review (susp): the cost a reservation's answer shows when the provider reserves whole machines (AWS: 8-GPU
instances), against the moto-backed fake, on SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.domain.reservations import term_seconds
from tests.integration.aws.conftest import Start
from tests.integration.aws.fake_aws import FakeAws
from tests.integration.aws.test_review_procure_whole_instances import ONE_GPU
from tests.integration.conftest import NOW_S
from tests.integration.test_api_planning import _hourly, _ingest

pytestmark = pytest.mark.aws
DAY = 86_400


def test_the_answer_shows_the_cost_of_the_machines_bought(aws_server: Start, fake: FakeAws) -> None:
    """Review (fixed), the defect: 1 H100 proposed on AWS is one p5.48xlarge bought (8 GPUs) and the approval values
    those 8 GPUs (two approvers above 100 k$), but the answer's ``est_cost_usd`` (POST and GET /v1/reservations, and
    each reservation ``plans:propose`` creates) said 38,210 $: the approvers were shown an eighth of what is charged
    and of what their threshold was applied to. Expected: ``est_cost_usd`` is the cost of the GPUs bought at the
    reservation's price; ``units`` stays the GPUs proposed."""
    server = aws_server()
    with server.client("finops_admin", "fiona") as c:
        created = c.post("/v1/reservations", json=ONE_GPU)
        assert created.status_code == 201, created.text
        body = created.json()
        again = c.get(f"/v1/reservations/{body['reservation_id']}").json()
    price = Decimal(str(body["price_usd_per_gpu_h"]))
    charged = (price * 8 * Decimal(term_seconds(12)) / 3600).quantize(Decimal("0.01"))
    assert body["units"] == 1 and body["approvals_required"] == 2
    assert Decimal(str(body["est_cost_usd"])) == charged > Decimal(100_000)
    assert Decimal(str(again["est_cost_usd"])) == charged


def test_plans_propose_shows_the_gpus_bought_and_their_cost(aws_server: Start, fake: FakeAws) -> None:
    """The same on ``POST /v1/plans:propose``: each reservation created lists ``units`` (proposed), ``units_bought``
    (the whole instances AWS reserves for them) and ``est_cost_usd`` for the GPUs bought."""
    server = aws_server()
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, 24.0))
    with server.client("ml_platform_admin", "bob") as bob:
        r = bob.post("/v1/plans:propose", json={"sku": "h100_80gb", "region": "us-east-1"})
        assert r.status_code == 200, r.text
        created = r.json()["created"]
        assert created, r.json()
        for c in created:
            res = bob.get(f"/v1/reservations/{c['reservation_id']}").json()
            price = Decimal(str(res["price_usd_per_gpu_h"]))
            hours = Decimal(term_seconds(c["term_months"])) / 3600
            assert c["units_bought"] == -(-c["units"] // 8) * 8
            assert Decimal(str(c["est_cost_usd"])) == (price * c["units_bought"] * hours).quantize(Decimal("0.01"))
