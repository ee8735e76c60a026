"""Review (k8s): what a new leader (failover, restart) knows of an earlier leader's writes on the real API server
(v1.20.2): its scale writes, its consolidation moves; and what a dry-run apply says of someone else's object."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig
from gpufleet.adapters.kubernetes.fakekubelet import FakeKubelet, FakeNode
from gpufleet.adapters.kubernetes.fleetobjects import collection_path
from gpufleet.adapters.kubernetes.rest import Kube
from gpufleet.schedule.table import PodRequest
from tests.integration import promserver
from tests.integration.k8s.helpers import create_pod, pod_body, pods_in, wait_for
from tests.integration.k8s.test_review_k8s_apply import _flavor
from tests.integration.k8s.test_review_serving2_scaling import (
    OPT_IN,
    SPAN_S,
    T0,
    _controller,
    _deployment,
    _openmetrics,
    _path,
    _replicas,
    _scales,
)


@pytest.fixture
def prometheus_url(ns: str, tmp_path: Path) -> Iterator[str]:
    assert promserver.available(), promserver.SKIP_REASON
    with promserver.prometheus_over(tmp_path, _openmetrics(ns)) as url:
        yield url


def test_a_scale_by_someone_else_during_a_failover_is_held_by_the_new_leader(
    kube: Kube, ns: str, prometheus_url: str
) -> None:
    """Review (fixed), the defect: what gpufleet last wrote to a Deployment's replicas lived only in the leader's
    memory; a new leader (a failover, a restart, a Lease regained) started with none, took the replicas it found as
    no one else's, and a human's ``kubectl scale`` made while no one led (or while the other leader did) was written
    over at its first period (here 2 -> 6). Now each scale write of gpufleet's carries, in the same update, the
    annotation ``gpufleet.io/scaled-replicas: "<replicas>@<time>"``, and a leader with no memory of a Deployment
    compares its replicas with that record: the human's 2 is held (``scaled_by_other``, ``wrote_from: record``)."""
    _deployment(kube, ns, "llm", 2, OPT_IN)
    clock = [float(T0 + SPAN_S)]
    a = _controller(kube, ns, prometheus_url, clock, {"llm"})
    try:
        a.maybe_scale()
        wrote = _replicas(kube, ns, "llm")
        assert wrote >= 6
        record = kube.get(_path(ns, "llm"))["metadata"]["annotations"]["gpufleet.io/scaled-replicas"]
        assert record == f"{wrote}@2025-12-01T01:00:00Z"
    finally:
        a.stop()
        a.view.stop()
    kube.patch(f"{_path(ns, 'llm')}/scale", {"spec": {"replicas": 2}})  # a human, while no one leads
    clock[0] += 60
    b = _controller(kube, ns, prometheus_url, clock, {"llm"})
    try:
        assert wait_for(lambda: [d.replicas for d in b.view.observation().deployments
                                 if (d.namespace, d.name) == (ns, "llm")] == [2])  # fmt: skip
        b.maybe_scale()
        assert _replicas(kube, ns, "llm") == 2, "the new leader wrote over someone else's scale"
        held = [a for a in _scales(b, ns, "llm") if a["reason"] == "scaled_by_other"]
        assert held and (held[0]["wrote"], held[0]["replicas_now"], held[0]["wrote_from"]) == (wrote, 2, "record")
    finally:
        b.stop()
        b.view.stop()


def _movable(kube: Kube, ns: str, name: str, node: str, gpus: int) -> None:
    labels = {"gpufleet.io/kind": "training", "app": name, "test.gpufleet.io/checkpoints": "true"}
    body = pod_body(name, PodRequest("x", 1000, 1024, gpus, 1000), "none", labels=labels,
                    annotations={"gpufleet.io/checkpointable": "true"})  # fmt: skip
    body["spec"]["nodeName"] = node
    create_pod(kube, ns, body)


def _consolidator(kube: Kube, ns: str, ident: str) -> Controller:
    cfg = ControllerConfig(scheduler_name=f"s-{ns}", namespace=ns, lease_name=f"l-{ns}", identity=ident,
                           consolidate_every_s=60, max_moves_per_hour=1, checkpoint_timeout_s=20)  # fmt: skip
    return Controller(kube, cfg).start()


def _consolidate(ctl: Controller) -> None:
    ctl._maybe_consolidate()
    if ctl._reclaim is not None:
        ctl._reclaim.join(60)


def test_a_new_leader_counts_the_moves_an_earlier_leader_made_this_hour(
    kube: Kube, kubelet: FakeKubelet, ns: str
) -> None:
    """Review (fixed), the defect: ``--max-moves-per-hour`` was counted from the leader's own audit only, so after a
    failover (or a restart) the new leader allowed the whole hour's moves again: here, with one move an hour, a
    second node was drained minutes after the first. Now each round reserves its moves (and gives back those not
    made) in a ledger on the Lease's Namespace (``gpufleet.io/consolidation-moves``), and a leader counts the larger
    of its own evictions and the ledger's moves in the hour."""
    p = f"m{uuid.uuid4().hex[:5]}"
    kubelet.register([FakeNode(f"{p}-a", gpus=8), FakeNode(f"{p}-b", gpus=8), FakeNode(f"{p}-d", gpus=8)])
    kubelet.start()
    _movable(kube, ns, "small-a", f"{p}-a", 1)
    _movable(kube, ns, "big", f"{p}-b", 5)
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    a = _consolidator(kube, ns, "a")
    try:
        assert wait_for(lambda: len([n for n in a.view.observation().nodes if n.name.startswith(p)]) == 3, 30)
        _consolidate(a)
        assert [a_["outcome"] for a_ in a.act.audit if a_["action"] == "evict"] == ["applied"]
        ledger = kube.get(f"/api/v1/namespaces/{ns}")["metadata"]["annotations"]["gpufleet.io/consolidation-moves"]
        assert len(ledger.split(",")) == 1
    finally:
        a.stop()
        a.view.stop()
    _movable(kube, ns, "small-d", f"{p}-d", 1)  # another lightly used node: a move the hour has no room for
    assert wait_for(lambda: all(x["status"].get("phase") == "Running" for x in pods_in(kube, ns)), 30)
    b = _consolidator(kube, ns, "b")
    try:
        assert wait_for(lambda: any(q.name == "small-d" and q.node for q in b.view.observation().pods), 30)
        _consolidate(b)
        assert [x for x in b.act.audit if x["action"] == "evict"] == [], "a second move in the hour after a failover"
        assert kube.get(f"/api/v1/nodes/{p}-d")["spec"].get("unschedulable") is not True
    finally:
        b.stop()
        b.view.stop()


def test_a_dry_run_apply_says_an_object_is_someone_elses(kube: Kube, ns: str) -> None:
    """Review (fixed), the defect: with ``--dry-run``, ``apply_object`` recorded ``dry_run`` for every object without
    reading it, so ``gpufleet k8s quotas --apply --dry-run`` said all was well over an administrator's object of
    gpufleet's name (no ``app.kubernetes.io/managed-by: gpufleet``) that the real apply refuses (``not_ours``, exit
    1). Now a dry run reads the object and reports what the apply would do: ``not_ours``, or ``dry_run`` with
    ``would`` ``create`` / ``replace``; nothing is written."""
    theirs = _flavor(f"admin-{ns}")
    theirs["spec"] = {"nodeLabels": {"pool": "admins"}}
    theirs["metadata"].pop("labels", None)
    path = collection_path(theirs)
    kube.post(path, theirs)
    rv = kube.get(f"{path}/admin-{ns}")["metadata"]["resourceVersion"]
    act = Actuator(kube, dry_run=True)
    assert act.apply_object(path, _flavor(f"admin-{ns}"), "quotas_compiled") == "not_ours"
    assert act.audit[-1]["outcome"] == "not_ours" and act.audit[-1]["dry_run"] is True
    assert act.apply_object(path, _flavor(f"admin-{ns}"), "quotas_compiled", adopt=True) == "dry_run"
    assert act.apply_object(path, _flavor(f"new-{ns}"), "quotas_compiled") == "dry_run"
    assert [a.get("would") for a in list(act.audit)[1:]] == ["replace", "create"]
    assert kube.get(f"{path}/admin-{ns}")["metadata"]["resourceVersion"] == rv
    kube.delete(f"{path}/admin-{ns}")
