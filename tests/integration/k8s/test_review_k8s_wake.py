"""Review (k8s): scale to zero and the wake-up after it (``no_wake_signal``) with a custom request-rate query, on the
real API server and a real Prometheus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.rest import Kube
from tests.integration import promserver
from tests.integration.k8s.test_review_serving2_scaling import (
    OPT_IN,
    SPAN_S,
    T0,
    _controller,
    _deployment,
    _openmetrics,
    _replicas,
    _scales,
)

ZERO_OK = {**OPT_IN, "gpufleet.io/min-replicas": "0"}


@pytest.fixture
def prometheus_url(ns: str, tmp_path: Path) -> Iterator[str]:
    assert promserver.available(), promserver.SKIP_REASON
    with promserver.prometheus_over(tmp_path, _openmetrics(ns)) as url:
        yield url


def test_a_custom_query_over_the_pods_does_not_take_the_deployment_to_zero(
    kube: Kube, ns: str, prometheus_url: str
) -> None:
    """Review (fixed), the defect: the wake guard (``no_wake_signal``) knew only the built-in default query as one
    read from the Deployment's pods; a ``gpufleet.io/rps-query`` over the same pods was trusted to outlive them, so an
    idle ``min-replicas: 0`` Deployment was scaled to zero, its series vanished with its pod and no request could
    wake it. Now a query that selects series by pod is the pods' (``reads_pods``): the 0 is lifted to 1."""
    own = 'sum(rate(vllm:request_success_total{namespace="$namespace",pod=~"$deployment-.+"}[2m]))'
    _deployment(kube, ns, "idle", 1, {**ZERO_OK, "gpufleet.io/rps-query": own})  # its pod served nothing all hour
    clock = [float(T0 + SPAN_S - 60)]
    ctl = _controller(kube, ns, prometheus_url, clock, {"idle"})
    try:
        ctl.maybe_scale()
        assert _replicas(kube, ns, "idle") == 1
        assert [a["reason"] for a in _scales(ctl, ns, "idle")] == ["no_wake_signal"]
    finally:
        ctl.stop()
        ctl.view.stop()


def test_a_deployment_at_zero_whose_query_answers_nothing_is_woken(kube: Kube, ns: str, prometheus_url: str) -> None:
    """Review (fixed), the defect: a Deployment at zero whose rate query answered with no series (a query by a label
    of its pods' series that gpufleet cannot recognise as theirs) was ``no_rate`` every period: rightly not read as
    zero traffic, but left at zero for good, its first request never seen. Now no series at zero replicas is
    unknown: the Deployment is woken to one replica (``no_signal_at_zero``, a warning audited with the query) and
    its query is taken as the pods' from then on."""
    # a query by a label the pods' scrape carries (not recognisable as the pods'): no pod, no series
    app = 'sum(rate(vllm:request_success_total{namespace="$namespace",app="$deployment"}[2m]))'
    _deployment(kube, ns, "ghost", 0, {**ZERO_OK, "gpufleet.io/rps-query": app})
    clock = [float(T0 + SPAN_S - 60)]
    ctl = _controller(kube, ns, prometheus_url, clock, {"ghost"})
    try:
        ctl.maybe_scale()
        assert _replicas(kube, ns, "ghost") == 1
        rec = _scales(ctl, ns, "ghost")[-1]
        assert (rec["reason"], rec["outcome"]) == ("no_signal_at_zero", "applied")
        clock[0] += 60  # one replica, still no series: no rate, left as it is (not read as zero)
        ctl.maybe_scale()
        assert _replicas(kube, ns, "ghost") == 1 and _scales(ctl, ns, "ghost")[-1]["reason"] == "no_rate"
    finally:
        ctl.stop()
        ctl.view.stop()
