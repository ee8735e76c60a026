"""Review (serving2): a Deployment's replica-scaling annotations, as the controller's view parses them."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.adapters.kubernetes.deployment_json import declared_serving
from gpufleet.domain.errors import ValidationError


def _dep(**ann: str) -> dict[str, Any]:
    base = {"gpufleet.io/target-rps": "10", "gpufleet.io/max-replicas": "20"}
    return {"metadata": {"namespace": "n", "name": "web", "annotations": {**base, **ann}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "s"}]}}}}  # fmt: skip


@pytest.mark.parametrize("raw", ["1e300", "2147483648", "99999999999"])
def test_a_max_replicas_past_what_spec_replicas_holds_is_refused_naming_the_annotation(raw: str) -> None:
    """Review (fixed), the defect: ``gpufleet.io/max-replicas: "1e300"`` was taken (an integer >= 1), so a load
    spike could be clamped to 10**300 replicas and written to ``spec.replicas`` (an int32). It is now refused
    naming the annotation (the view lists the Deployment in ``bad_objects`` and leaves it alone)."""
    with pytest.raises(ValidationError, match=r"gpufleet.io/max-replicas"):
        declared_serving(_dep(**{"gpufleet.io/max-replicas": raw}))


@pytest.mark.parametrize("raw", ["-1", "0", "nan", "inf", "2.5", "many"])
def test_a_negative_zero_or_not_integer_max_replicas_is_refused(raw: str) -> None:
    """Review (holds): a max-replicas that is not an integer >= 1 is refused naming the annotation."""
    with pytest.raises(ValidationError, match=r"gpufleet.io/max-replicas"):
        declared_serving(_dep(**{"gpufleet.io/max-replicas": raw}))


def test_a_deployment_whose_pods_ask_no_gpu_declares_zero_gpus_per_replica() -> None:
    """Review (holds): a serving Deployment whose pods ask no GPU is still scaled (its replicas are priced at
    nothing: no noise floor), not refused and not counted as GPUs."""
    d = declared_serving(_dep())
    assert d is not None and d.gpus_per_replica == 0 and d.scaling.max_replicas == 20
