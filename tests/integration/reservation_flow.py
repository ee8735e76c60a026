"""A reservation's steps through the API as the provider tests take them: approve, run a reconciler pass, read the
status (shared by the AWS and GCP provider tests)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.conftest import LiveServer


def approve(server: LiveServer, rid: str, role: str, user: str) -> httpx.Response:
    with server.client(role, user) as c:
        return c.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "ML-2026"})


def reconcile(server: LiveServer) -> dict[str, Any]:
    with server.client("finops_admin", "alice") as c:
        r = c.post("/v1/reservations:reconcile")
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out


def status(server: LiveServer, rid: str) -> str:
    with server.client("viewer", "vic") as c:
        return str(c.get(f"/v1/reservations/{rid}").json()["status"])
