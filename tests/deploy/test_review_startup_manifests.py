"""Review (startup): the API's probes and the migration Job in the shipped manifests (deploy/kustomize; deploy/kubernetes
holds only the controller's RBAC, no Deployment, probe or Job)."""

from __future__ import annotations

from gpufleet.service.settings import Settings
from tests.deploy.test_manifests import _by_kind, _render, needs_kubectl


@needs_kubectl
def test_readiness_probe_waits_longer_than_the_route_bounds_itself() -> None:
    """Review (fixed), the defect: the readiness probe timed out at 2 s while ``/readyz`` waits for the database up
    to the connect timeout + 1 s (6 s with the shipped settings): a slow but working database read as not ready (a
    probe timeout) instead of the route's own answer. The route's bound, computed by the route's code from the
    shipped ConfigMap, must be below the probe's timeoutSeconds."""
    from gpufleet.api.routes.health import ready_budget_s

    docs = _render()
    config = _by_kind(docs, "ConfigMap", "gpufleet-config")["data"]
    settings = Settings(**{k.removeprefix("GPUFLEET_").lower(): v for k, v in config.items()})
    (c,) = _by_kind(docs, "Deployment", "gpufleet-api")["spec"]["template"]["spec"]["containers"]
    probe = c["readinessProbe"]
    assert ready_budget_s(settings) < probe["timeoutSeconds"], (ready_budget_s(settings), probe)
    assert ready_budget_s(settings) + 1 <= probe["timeoutSeconds"]  # a second's margin for the answer itself
    # /healthz touches nothing (no thread, no database): its probes' 2 s stay ample
    assert c["livenessProbe"]["httpGet"]["path"] == c["startupProbe"]["httpGet"]["path"] == "/healthz"


@needs_kubectl
def test_the_migration_job_is_bounded_in_time_and_retries() -> None:
    """Review (fixed), the defect: the migration Job had no ``activeDeadlineSeconds``: an upgrade waiting on a lock
    (another upgrade's advisory lock is waited for without a bound, by design) held the rollout forever, the API
    pods never ready. Now the Job fails after a deadline (1800 s), with a bounded number of retries (6)."""
    job = _by_kind(_render(), "Job", "gpufleet-migrate")["spec"]
    assert 0 < job.get("activeDeadlineSeconds", 0) <= 3600, job
    assert 0 < job.get("backoffLimit", -1) <= 10, job
