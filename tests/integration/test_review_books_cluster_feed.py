"""Review: ``GET /v1/clusters/{cluster}/feed`` (service/cluster_feed.py) against the sources the controller's usage
meter really writes (``adapters/kubernetes/usage.py`` ``holdings``: ``safe_id(f"k8s:{cluster}:{region}:...")``)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session

from gpufleet.adapters.kubernetes.usage import ClosedHour, holdings, store_pools, usage_records
from gpufleet.adapters.sql.models import ClusterRow
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import NodeSpec, PodRequest
from tests.integration.conftest import NOW_S, Database
from tests.integration.review_books_helpers import ADMIN, VIEWER, H, services


def _metered_hour(db: Database, cluster: str) -> list[dict[str, Any]]:
    """What the meter of ``cluster`` writes for an hour in which one pod held 4 GPUs on a us-east-1 on-demand node."""
    node = ObservedNode(NodeSpec("gpu-0", 128_000, 1_024_000, 8), sku="NVIDIA-H100-80GB-HBM3", region="us-east-1",
                        capacity_type="on-demand")  # fmt: skip
    pod = ObservedPod(PodRequest("ns/train", 1000, 1024, 4, 1000), "ns", "train", "train", "Running", node="gpu-0",
                      team="ml")  # fmt: skip
    with Session(db.engine) as s:
        skus, pools = store_pools(s)
    held = holdings(Observation(NOW_S, (node,), (pod,)), cluster, skus, pools).pods
    hour = ClosedHour(NOW_S - 2 * H, float(H), {k: (key, g * H) for k, (key, g) in held.items()})
    return usage_records(hour, {}, H).records


def test_a_clusters_feed_does_not_count_another_cluster_whose_id_starts_with_it(database: Database) -> None:
    """Defect: the feed selects records by ``source.startswith(f"k8s:{cluster}:")``, and cluster ids may contain
    ``:``. The meter of cluster ``prod:eu`` writes ``k8s:prod:eu:us-east-1:h100_80gb:on_demand``, which the feed of
    cluster ``prod`` (that never fed anything) counts as its own: status ok, 4 GPU-hours. Fixed: a new cluster id
    with ``:`` is refused (registry ``id``, controller ``--cluster``), and the feed leaves out the sources of a
    longer registered cluster (one registered before the rule, inserted directly here)."""
    svc, _clock, _finops = services(database, NOW_S)
    svc.registry.create(ADMIN, "cluster", {"id": "prod", "name": "prod", "region_id": "us-east-1"})
    # the fix refuses ':' in a new cluster id (and in the controller's --cluster when it meters) ...
    with pytest.raises(ValidationError) as refused:
        svc.registry.create(ADMIN, "cluster", {"id": "prod:eu", "name": "prod:eu", "region_id": "us-east-1"})
    assert refused.value.field == "id"
    # ... and a cluster registered before the rule still feeds only itself
    with Session(database.engine) as s, s.begin():
        s.add(ClusterRow(id="prod:eu", name="prod:eu", region_id="us-east-1"))
    svc.ingest.ingest(ADMIN, _metered_hour(database, "prod:eu"))
    assert svc.cluster_feed.feed(VIEWER, "prod:eu")["usage"]["gpu_hours_last_day"] == 4.0
    usage = svc.cluster_feed.feed(VIEWER, "prod")["usage"]
    assert (usage["status"], usage["gpu_hours_last_day"]) == ("never", 0.0), usage


def test_a_cluster_with_a_long_id_sees_what_its_meter_wrote(database: Database) -> None:
    """Defect: the meter shortens a source over 64 characters to its first 55 and a hash (``safe_id``), which cuts
    ``k8s:<cluster>:`` itself once the cluster id has more than 50 characters; the feed's prefix match then finds
    nothing and reports a cluster whose controller writes every hour as ``never`` fed. Fixed: ``source_id`` keeps
    ``k8s:<cluster>:`` whole and shortens the rest (with a hash); longer cluster ids (over 53) are refused."""
    cluster = "gke-production-us-east1-gpu-training-cluster-0001-abc"  # 53 characters: a valid id
    svc, _clock, _finops = services(database, NOW_S)
    svc.registry.create(ADMIN, "cluster", {"id": cluster, "name": "prod", "region_id": "us-east-1"})
    records = _metered_hour(database, cluster)
    assert svc.ingest.ingest(ADMIN, records).inserted == 1
    usage = svc.cluster_feed.feed(VIEWER, cluster)["usage"]
    assert (usage["status"], usage["gpu_hours_last_day"]) == ("ok", 4.0), (records[0]["source"], usage)
