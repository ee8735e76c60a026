"""The request bodies of the design's API sketches, as written (issue #3's "endpoints of the design"). They are
the OpenAPI examples of their operations, so the docs show them and schemathesis sends them as explicit
examples; the attack replay sends them too."""

from __future__ import annotations

from typing import Any

PLACEMENT: dict[str, Any] = {"job_class": "training", "priority": "high"}
WORKLOAD: dict[str, Any] = {
    "name": "llm-serve",
    "image": "registry.example.com/llm-serve:1.4",
    "cpu": 8,
    "mem_gb": 64,
    "gpus": 1,
    "gpu_sku": "H100",
    "min_replicas": 2,
    "max_replicas": 20,
    "scale_metric": "gpu-util",
    "budget_usd_day": 2000,
    "team": "search",
    "tenant": "search-prod",
    "priority": "high",
}
RESERVATION: dict[str, Any] = {
    "sku": "h100_80gb",
    "units": 8,
    "start": "2027-01-01T00:00:00Z",
    "term_months": 12,
    "regions": ["us-east-1", "us-west-2"],
}
APPROVE: dict[str, Any] = {"approver_ids": ["alice", "bob"], "budget_code": "AI-2026"}


def example(value: dict[str, Any]) -> dict[str, Any]:
    """FastAPI ``openapi_examples`` with the seed body as the one named example."""
    return {"seed": {"summary": "the design's request body, as written", "value": value}}
