"""Schemathesis against the app's own OpenAPI, over HTTP: no 5xx, and every response conforms to the
documented status codes, content types, headers and schemas. Bounded: a few examples per operation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.conftest import BACKENDS, Database, LiveServer, _make_database, _start

EXAMPLES = 3
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module", params=BACKENDS)
def fuzz_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pg_reason: str | None
) -> Iterator[LiveServer]:
    gen = _make_database(request.param, Path(tmp_path_factory.mktemp("fuzz")), pg_reason)
    db: Database = next(gen)
    server = _start(db)
    yield server
    server.stop()
    next(gen, None)


SEEDED = {
    "POST /v1/placement/recommendations",
    "POST /v1/workloads",
    "POST /v1/reservations",
    "POST /v1/reservations/{reservation_id}/approve",
}


def test_the_seeds_request_bodies_as_explicit_examples(fuzz_server: LiveServer) -> None:
    """The design's request bodies (the operations' OpenAPI examples) sent as written: no failure of any check,
    and the placement, workload and reservation bodies are accepted (2xx) as they are."""
    with fuzz_server.client("ml_platform_admin", "fuzzer") as c:
        c.post("/v1/teams", json={"id": "search", "name": "Search"})
        c.post("/v1/tenants", json={"id": "search-prod", "name": "prod", "team_id": "search"})
        c.post("/v1/pools", json={"id": "aws/us-west-2/h100_80gb/reserved", "provider_id": "aws",
                                  "region_id": "us-west-2", "sku_id": "h100_80gb", "tier": "reserved",
                                  "price_usd_per_gpu_h": "4.3619", "term_months": 12})  # fmt: skip
    headers = {"Authorization": f"Bearer {fuzz_server.token('ml_platform_admin', 'fuzzer')}"}
    api = schemathesis.openapi.from_url(f"{fuzz_server.base_url}/openapi.json")
    failures: list[str] = []
    seen: dict[str, list[int]] = {}
    for result in api.get_all_operations():
        operation = result.ok()
        if operation.label not in SEEDED:
            continue
        label = operation.label
        for strategy in operation.get_strategies_from_examples():

            @given(case=strategy)
            @settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def run(case: schemathesis.Case) -> None:
                response = case.call_and_validate(base_url=fuzz_server.base_url, headers=headers, checks=CHECKS)
                seen.setdefault(label, []).append(response.status_code)  # noqa: B023 (run now, in this loop)

            try:
                run()
            except Exception as exc:
                failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert not failures, "\n\n".join(failures)
    assert set(seen) == SEEDED, seen
    for label in SEEDED - {"POST /v1/reservations/{reservation_id}/approve"}:  # approve: a made-up id is a 404
        assert any(200 <= code < 300 for code in seen[label]), (label, seen[label])
    print(f"schemathesis explicit examples: {seen}")


def test_api_conforms_to_its_openapi(fuzz_server: LiveServer) -> None:
    """Every operation, a few generated cases each; all failures are collected and reported together."""
    token = fuzz_server.token("ml_platform_admin", "fuzzer")
    headers = {"Authorization": f"Bearer {token}"}
    api = schemathesis.openapi.from_url(f"{fuzz_server.base_url}/openapi.json")
    failures: list[str] = []
    statuses: dict[int, int] = {}
    operations = 0
    for result in api.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case: schemathesis.Case) -> None:
            response = case.call_and_validate(base_url=fuzz_server.base_url, headers=headers, checks=CHECKS)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        try:
            run()
        except Exception as exc:
            failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert operations >= 50
    assert not failures, "\n\n".join(failures)
    print(f"schemathesis: {operations} operations, responses by status {sorted(statuses.items())}")
    assert sum(statuses.values()) >= 2 * operations
    assert any(200 <= code < 300 for code in statuses)  # not only rejections
