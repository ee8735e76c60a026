"""Review (k8s): gpufleet's scale record on a Deployment (``gpufleet.io/scaled-replicas``), as a leader with no
memory of its own writes reads it (``control/scale_ownership.py``, ``adapters/kubernetes/deployment_json.py``)."""

from __future__ import annotations

from gpufleet.adapters.kubernetes.deployment_json import A_SCALED_REPLICAS, recorded_replicas, scale_record
from gpufleet.control.observation import ObservedDeployment
from gpufleet.control.scale_ownership import SCALED_BY_OTHER, ScaleOwnership


def _dep(replicas: int, recorded: int | None) -> ObservedDeployment:
    return ObservedDeployment("ns", "llm", replicas, replicas, "serving", scaled_replicas=recorded)


def test_the_record_reads_back_and_anything_else_is_no_record() -> None:
    """Review (fixed, with the record): the record round-trips; absent, garbled, negative or beyond an int32 it is no
    evidence (None), as a Deployment gpufleet never scaled."""
    assert scale_record(6, 1_764_550_800) == "6@2025-12-01T01:00:00Z"
    assert recorded_replicas({A_SCALED_REPLICAS: scale_record(6, 0)}) == 6
    for raw in (None, "", "six@x", "-1@x", "99999999999@x", 6):
        assert recorded_replicas({A_SCALED_REPLICAS: raw} if raw is not None else {}) is None


def test_a_leader_with_no_memory_holds_replicas_other_than_the_record_once() -> None:
    """Review (fixed): with no memory, replicas other than the record are someone else's (held, ``wrote_from:
    record``); the record is read at first sight only (a hold's end is not a new strike from the same old record);
    no record, or a record equal to the replicas, is no one else's."""
    own = ScaleOwnership()
    got = own.held([_dep(2, 6)], 0.0, period=True)
    assert got.keys == {("ns", "llm")}
    assert [(h.reason, h.extra["wrote"], h.extra["wrote_from"]) for h in got.audit] == [(SCALED_BY_OTHER, 6, "record")]
    assert own.held([_dep(2, 6)], 601.0, period=True).keys == set()
    assert own.strikes(("ns", "llm")) == 1
    assert ScaleOwnership().held([_dep(2, None)], 0.0, period=True).keys == set()
    assert ScaleOwnership().held([_dep(2, 2)], 0.0, period=True).keys == set()


def test_the_fast_path_leaves_a_deployment_off_its_record_to_the_period() -> None:
    """Review (fixed): the fast path (scale-up only) of a leader with no memory does not scale up over a scale the
    record says is someone else's; the period then holds it."""
    own = ScaleOwnership()
    assert own.held([_dep(2, 6)], 0.0, period=False).keys == {("ns", "llm")}
    assert own.held([_dep(2, 6)], 1.0, period=True).audit[0].extra["wrote_from"] == "record"
