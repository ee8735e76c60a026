"""Applying a :class:`~gpufleet.control.reclaim.ReclaimPlan`: cordon, checkpoint handshake, Eviction API.

For each drain: cordon the node; for each checkpointable training pod, set the annotation
``gpufleet.io/checkpoint-requested: <token>`` and wait (up to ``checkpoint_timeout_s``) for the workload to
answer ``gpufleet.io/checkpoint-done: <same token>`` after it has written its checkpoint; then evict every
pod through the Eviction API (``policy/v1`` where served, else ``policy/v1beta1``: ``Actuator.eviction_api``; the
API server enforces PodDisruptionBudgets and answers 429 with the cause ``DisruptionBudget`` when a budget allows
no disruption: posted once, :func:`~gpufleet.adapters.kubernetes.act.pdb_refusal`), each pod with its own
``terminationGracePeriodSeconds`` unless ``grace_s`` says otherwise. Each pod is read first and evicted only if it is
still on the drained node, with its uid as the eviction's precondition: a pod that ended, or another pod created
under its name since the decision, is not evicted (recorded ``not_on_node``). If a checkpoint is not confirmed in time
or an eviction is refused by a budget, the drain stops there and the node is uncordoned (reason
``checkpoint_timeout`` / ``blocked_by_pdb``; ``refused`` collects the refused pod, for the preemption planner's
backoff; an eviction still throttled after the Actuator's retries stops it as ``failed``, ``eviction_failed``); pods already evicted are recreated by their owners and scheduled again. The cordon is
gpufleet's own (:meth:`Actuator.cordon_own`: marked with the annotation ``gpufleet.io/cordoned-by``) and only such a
cordon is undone (:meth:`Actuator.uncordon_own`): a node an administrator had cordoned is drained but stays
cordoned.
Priority preemption (the controller, :func:`apply_preemption`) uses the same path without the cordon (``cordon=False``): the node keeps
its other pods and takes the preemptor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.labels import A_IDLE_SINCE
from gpufleet.adapters.kubernetes.rest import JSON, ApiError, Kube
from gpufleet.control.node_release import LAUNCHED, NODE_BOUND_OWNERS, NodeRelease
from gpufleet.control.observation import Observation
from gpufleet.control.preempting import PreemptDecision, Victim
from gpufleet.control.reclaim import NodeDrain, ReclaimPlan

A_CKPT_REQUESTED = "gpufleet.io/checkpoint-requested"
A_CKPT_DONE = "gpufleet.io/checkpoint-done"


def _checkpointed(kube: Kube, key: str, token: str) -> bool:
    ns, name = key.split("/", 1)
    try:
        pod = kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    except ApiError:
        return False
    return bool((pod["metadata"].get("annotations") or {}).get(A_CKPT_DONE) == token)


def _on_node(act: Actuator, ns: str, name: str, node: str) -> tuple[str, str | None]:
    """Whether the pod under that name is still on the drained node (``here`` and its uid), is ``elsewhere`` (gone,
    finished, or another pod of that name on another node), or could not be ``unread``."""
    try:
        pod = act.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    except ApiError as exc:
        return ("elsewhere", None) if exc.status == 404 else ("unread", None)
    same_node = (pod.get("spec") or {}).get("nodeName") == node
    finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    return ("here", str(pod["metadata"].get("uid") or "")) if same_node and not finished else ("elsewhere", None)


def apply_drain(
    act: Actuator,
    drain: NodeDrain,
    *,
    checkpoint_timeout_s: float = 120.0,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    cordon: bool = True,
    grace_s: int | None = None,
    refused: list[str] | None = None,
) -> str:
    """Returns ``drained`` | ``dry_run`` | ``checkpoint_timeout`` | ``blocked_by_pdb`` | ``failed``.
    ``cordon=False``: evict without cordoning the node first (nor uncordoning it after a failure).
    ``grace_s``: the evicted pods' termination grace (None: each pod's own ``terminationGracePeriodSeconds``).
    ``refused``: where the pod (``namespace/name``) whose PodDisruptionBudget refused its eviction is appended."""
    if cordon and act.cordon_own(drain.node, drain.reason) not in ("applied", "dry_run", "cordoned_by_other"):
        return "failed"

    def uncordon(reason: str) -> None:  # only gpufleet's own cordon: one an administrator placed stands
        if cordon:
            act.uncordon_own(drain.node, reason)

    token = f"{int(act.clock())}"
    for key in drain.checkpoint_first:
        ns, name = key.split("/", 1)
        act.annotate_pod(ns, name, {A_CKPT_REQUESTED: token}, "checkpoint_before_eviction")
    if not act.dry_run:
        deadline = clock() + checkpoint_timeout_s
        waiting = list(drain.checkpoint_first)
        while waiting and clock() < deadline:
            waiting = [k for k in waiting if not _checkpointed(act.kube, k, token)]
            if waiting:
                sleep(poll_s)
        if waiting:
            act.record("drain", drain.node, "checkpoint_timeout", "stopped", pods=waiting)
            uncordon("checkpoint_timeout")
            return "checkpoint_timeout"
    for key in drain.evict:
        ns, name = key.split("/", 1)
        uid = None
        if not act.dry_run:
            where, uid = _on_node(act, ns, name, drain.node)
            if where == "elsewhere":  # ended, or a new pod under its name since the decision: not the one decided on
                act.record("evict", key, drain.reason, "not_on_node", node=drain.node)
                continue
            if where == "unread":
                uncordon("eviction_failed")
                return "failed"
        out = act.evict(ns, name, drain.reason, grace_s, uid=uid)
        if out == "conflict":  # replaced between the read and the eviction (the uid precondition): not ours
            continue
        if out == "refused_429":  # its PodDisruptionBudget's answer (a throttled eviction is "throttled": failed)
            if refused is not None:
                refused.append(key)
            uncordon("blocked_by_pdb")
            return "blocked_by_pdb"
        if out not in ("applied", "dry_run", "not_found"):
            uncordon("eviction_failed")
            return "failed"
    return "dry_run" if act.dry_run else "drained"


def apply_reclaim(act: Actuator, plan: ReclaimPlan, **kw: float | None) -> dict[str, str]:
    return {d.node: apply_drain(act, d, **kw) for d in plan.drains}  # type: ignore[arg-type]


def apply_preemption(
    act: Actuator, d: PreemptDecision, *, checkpoint_timeout_s: float, grace_s: int | None
) -> tuple[dict[str, str], tuple[str, ...]]:
    """A preemption decision's evictions (control/preempting.py): node by node (sorted), :func:`apply_drain` without
    the cordon, stopping at the first node that does not drain. Returns each node's outcome and the uids of the
    victims their PodDisruptionBudget refused (the planner bars them a while: ``BindingPlanner.cancel``)."""
    by_node: dict[str, list[Victim]] = {}
    for v in d.victims:
        by_node.setdefault(v.node, []).append(v)
    got: dict[str, str] = {}
    refused: list[str] = []  # victims (namespace/name) their budget refused
    for node, vs in sorted(by_node.items()):
        drain = NodeDrain(node, tuple(v.pod for v in vs), tuple(v.pod for v in vs if v.action == "checkpoint_then_stop"),
                          0, d.reason)  # fmt: skip
        got[node] = apply_drain(act, drain, checkpoint_timeout_s=checkpoint_timeout_s, cordon=False, grace_s=grace_s,
                                refused=refused)  # fmt: skip
        if got[node] not in ("drained", "dry_run"):
            break
    return got, tuple(v.uid for v in d.victims if v.pod in refused)


def _node_bound(pod: JSON) -> bool:
    """A DaemonSet's pod or a static pod's mirror (its first owner's kind, as the observation reads it): it goes
    with the node (``control/node_release.py``, :func:`~gpufleet.control.node_release.node_bound`)."""
    owners = (pod.get("metadata") or {}).get("ownerReferences") or [{}]
    return str(owners[0].get("kind", "")) in NODE_BOUND_OWNERS


def apply_release(act: Actuator, release: NodeRelease) -> str:
    """Release an idle launched node (control/node_release.py): cordon it as gpufleet's own
    (:meth:`Actuator.cordon_own`: only a node still schedulable, its cordon marked), check on the API server that no
    pod not finished is bound to it but DaemonSet and static pods (a bind may have landed since the observation),
    then delete the Node. Returns ``released`` | ``dry_run`` | ``cordoned_by_other`` (someone cordoned it since the
    observation: nothing written, their cordon stands) | ``node_busy`` (uncordoned, nothing deleted) | ``failed``
    (uncordoned too when the delete failed: a cordoned node is offered for release no more, nor used). Only
    gpufleet's own cordon is undone (:meth:`Actuator.uncordon_own`): one an administrator placed is left.

    A parked node (``release.parked``: already under gpufleet's own cordon, a drained node or a release cut short)
    is not cordoned again: it must still carry gpufleet's cordon (:meth:`Actuator.own_cordon_now`; else
    ``cordoned_by_other``, or ``released`` when it is gone), and a pod found on it (an evicted pod still
    terminating) leaves it parked as it is (``node_busy``, nothing undone: the next round looks again)."""
    if release.parked:
        return _release_parked(act, release)
    cordoned = act.cordon_own(release.node, release.reason)
    if cordoned == "cordoned_by_other":
        act.record("release", release.node, "cordoned_by_other", "stopped")
        return "cordoned_by_other"
    if cordoned not in ("applied", "dry_run"):
        return "failed"
    if not act.dry_run:
        try:
            pods = act.kube.get("/api/v1/pods", fieldSelector=f"spec.nodeName={release.node}").get("items") or []
        except ApiError:
            act.uncordon_own(release.node, "release_check_failed")
            return "failed"
        live = _live(pods)
        if live:
            act.record("release", release.node, "node_busy", "stopped", pods=len(live))
            act.uncordon_own(release.node, "node_busy")
            return "node_busy"
    out = act.delete_node(release.node, release.reason)
    if out == "dry_run":
        return "dry_run"
    if out in ("applied", "not_found"):
        return "released"
    act.uncordon_own(release.node, "release_delete_failed")
    return "failed"


def _live(pods: list[JSON]) -> list[JSON]:
    """The pods not finished, DaemonSet and static pods aside: what keeps a node from being released."""
    return [
        p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not _node_bound(p)
    ]


def _release_parked(act: Actuator, release: NodeRelease) -> str:
    """:func:`apply_release` of a node gpufleet has cordoned already: check the mark, the pods, then delete."""
    if act.dry_run:
        act.record("release", release.node, release.reason, "dry_run", parked=True)
        return "dry_run"
    mark = act.own_cordon_now(release.node)
    if mark == "not_found":
        return "released"
    if mark == "not_ours":  # uncordoned, or the mark removed (an administrator keeps it): not ours to delete
        act.record("release", release.node, "cordoned_by_other", "stopped", parked=True)
        return "cordoned_by_other"
    if mark != "ours":
        return "failed"
    try:
        pods = act.kube.get("/api/v1/pods", fieldSelector=f"spec.nodeName={release.node}").get("items") or []
    except ApiError:
        return "failed"
    live = _live(pods)
    if live:
        act.record("release", release.node, "node_busy", "stopped", pods=len(live), parked=True)
        return "node_busy"
    out = act.delete_node(release.node, release.reason)
    if out in ("applied", "not_found"):
        return "released"
    return "failed"


def mark_idle(
    act: Actuator,
    obs: Observation,
    marks: dict[str, int],
    gone: Collection[str] = (),
    written: dict[str, int | None] | None = None,
) -> None:
    """Keep the annotation ``gpufleet.io/idle-since`` of each launched GPU node of ``obs`` (but those in ``gone``,
    released) in step with the release planner's idle spells (``marks``: node -> Unix time its spell began,
    :meth:`~gpufleet.control.node_release.NodeReleasePlanner.idle_marks`): written when a spell begins (a merge patch
    of the annotation alone, audit action ``mark_idle``), removed when the node is no longer idle (``unmark_idle``),
    left as it is meanwhile. A controller that starts reads it for the nodes it finds idle, so a restart (a crash
    loop, a new Lease holder) does not start their idle time again; a failed write is tried again next round.
    ``written`` (the controller's memory, node -> the value it last wrote, None for a removal): a write this controller
    already made is not made again while its own watch has not shown it yet (a round can come before the node's
    update event); a mark removed by hand meanwhile is written again at the node's next idle spell."""
    if written is not None:
        for name in set(written) - {n.name for n in obs.nodes}:
            del written[name]  # the node is gone
    for n in obs.nodes:
        if n.name in gone or not n.sku or n.capacity_type not in LAUNCHED:
            continue
        want = marks.get(n.name)
        if (want is None) == (n.idle_s is None):
            continue
        if written is not None and n.name in written and written[n.name] == want:
            continue  # written by this controller already; the view has not caught up with it
        value = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(want)) if want is not None else None
        body: JSON = {"metadata": {"annotations": {A_IDLE_SINCE: value}}}
        action = "mark_idle" if want is not None else "unmark_idle"
        outcome = act.merge_patch(f"/api/v1/nodes/{n.name}", body, action, n.name, "idle_since")
        if written is not None and outcome == "applied":
            written[n.name] = want
