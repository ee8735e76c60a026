"""``gpufleet serve --provider aws --dry-run`` prints the AWS calls startup would make -- validated by botocore's
model, never sent, nothing written -- and reads credentials only through the standard chain (none printed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from gpufleet.adapters.providers import SimulatedProvider
from gpufleet.adapters.sql import migrate
from gpufleet.adapters.sql.engine import make_engine
from gpufleet.adapters.sql.models import AuditEventRow, ReservationRow
from gpufleet.cli.main import app as cli
from gpufleet.service.auth import Actor, Role
from gpufleet.service.bootstrap import build_services
from gpufleet.service.clock import FixedClock
from gpufleet.service.settings import Settings

pytestmark = pytest.mark.aws
NOW_S = 1_767_225_600


def test_dry_run_prints_the_calls_and_sends_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'dry.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    sim = SimulatedProvider(engine)
    for _ in range(3):
        sim.inject("timeout_before_order")  # the approval's submission never reaches a provider: stays approved
    services = build_services(Settings(db_url=url), engine=engine, clock=FixedClock(NOW_S), provider=sim)
    carol, alice = Actor("carol", Role.ML_PLATFORM_ADMIN, None), Actor("alice", Role.FINOPS_ADMIN, None)
    res = services.reservations.create(  # requested by one admin, approved by another (no self-approval)
        carol, sku_id="h100_80gb", units=8, start_s=NOW_S + 86400, term_months=1, regions=["us-east-1"]
    )
    assert services.reservations.approve(alice, res.id, approver_ids=None, budget_code="X").status.value == "approved"
    with Session(engine) as s:
        events_before = s.scalar(select(func.count()).select_from(AuditEventRow))

    secret = "sEcReT-not-a-real-key-0000"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    # nothing listens on port 9: a call that left the process would fail
    monkeypatch.setenv("GPUFLEET_AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    out = CliRunner().invoke(cli, ["serve", "--db", url, "--provider", "aws", "--dry-run"])

    assert out.exit_code == 0, out.output
    lines = [ln for ln in out.output.splitlines() if ln.startswith("DRY-RUN ")]
    ops = [ln.split()[1] for ln in lines]
    assert ops[:2] == ["ec2.DescribeCapacityReservations", "ec2.CreateCapacityReservation"]
    create = lines[1]
    assert f"'ClientToken': 'gpufleet-{res.id}'" in create and "'InstanceType': 'p5.48xlarge'" in create
    assert ops.count("service-quotas.GetServiceQuota") == 4 and "pricing.GetProducts" in ops
    assert re.search(r"dry run: \d+ AWS calls printed, none sent", out.output)
    assert secret not in out.output and "testing" not in out.output
    with Session(engine) as s:
        assert s.scalar(select(ReservationRow.status).where(ReservationRow.id == res.id)) == "approved"
        assert s.scalar(select(func.count()).select_from(AuditEventRow)) == events_before
    engine.dispose()


def test_dry_run_needs_the_aws_provider(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    out = CliRunner().invoke(cli, ["serve", "--db", url, "--dry-run"])
    assert out.exit_code == 2 and "--provider aws" in out.output
    bad = CliRunner().invoke(cli, ["serve", "--db", url, "--provider", "gcp"])
    assert bad.exit_code == 2 and "gcp" in bad.output
