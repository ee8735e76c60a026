"""The GCP adapter's pure parts: resource names and request ids derived from idempotency keys, the machine types,
the configuration's refusals."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.adapters.gcp.machines import machine_type, machines_for
from gpufleet.adapters.gcp.reservations import epoch_s, request_id, resource_name, rfc3339
from gpufleet.adapters.gcp.session import GcpConfig
from gpufleet.domain.errors import ValidationError

GCP_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@given(st.text(max_size=200))
def test_every_key_gets_a_legal_stable_name(key: str) -> None:
    name = resource_name(key)
    assert GCP_NAME.fullmatch(name) and len(name) <= 63
    assert resource_name(key) == name


def test_keys_that_read_alike_get_different_names() -> None:
    names = {resource_name(k) for k in ("gpufleet-res_ab12", "gpufleet-res-ab12", "GPUFLEET-RES_AB12")}
    assert len(names) == 3
    assert resource_name("gpufleet-res_ab12").startswith("gpufleet-res-ab12-")


def test_request_ids_are_fresh_uuids() -> None:
    a, b = request_id(), request_id()
    assert a != b
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", a)


def test_times_round_trip() -> None:
    assert rfc3339(1_767_225_600) == "2026-01-01T00:00:00Z"
    assert epoch_s(rfc3339(1_767_225_600)) == 1_767_225_600


def test_machines_are_whole_and_l40s_is_not_sold() -> None:
    assert machine_type("h100_80gb").name == "a3-highgpu-8g"
    assert (machines_for("h100_80gb", 16), machines_for("h100_80gb", 17), machines_for("l4", 1)) == (2, 3, 1)
    with pytest.raises(ValidationError, match="l40s"):
        machine_type("l40s")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"project": ""}, "gcp_project"),
        ({"project": "p", "regions": ()}, "gcp_regions"),
        ({"project": "p", "max_attempts": 0}, "gcp_max_attempts"),
        ({"project": "p", "credentials": "none"}, "gcp_credentials"),  # no credentials only against an emulator
        ({"project": "p", "credentials": "key.json"}, "gcp_credentials"),
    ],
)
def test_the_configuration_refuses(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        GcpConfig(**kwargs)  # type: ignore[arg-type]
    assert exc.value.field == field


def test_zones_default_to_a() -> None:
    assert GcpConfig(project="p", zones={"europe-west4": "europe-west4-b"}).zone("us-central1") == "us-central1-a"
    assert GcpConfig(project="p", zones={"europe-west4": "europe-west4-b"}).zone("europe-west4") == "europe-west4-b"
