"""Actuators: the writes gpufleet makes to a cluster, each recorded as an audit event, each with dry-run.

Every action goes through :class:`Actuator`. In dry-run mode it records (and logs) what it would do and sends
nothing: not even a Lease or an Event. Otherwise it sends the request, retrying transient failures (429,
5xx, no answer) up to ``retries`` times with backoff (or after the server's ``Retry-After``, the max-in-flight and
priority-and-fairness filters' 429, up to ``RETRY_AFTER_MAX_S``), and records the outcome. A PodDisruptionBudget's
refusal of an eviction (:func:`pdb_refusal`: 429 with the cause ``DisruptionBudget``, no Retry-After) is an answer,
not a transient failure: never retried, outcome ``refused_429``; a 429 that outlasts the retries is ``throttled``. The audit trail is a list of
dicts (``action``, ``target``, ``reason``, ``outcome``, ``dry_run``, ``at_s``; the last ``AUDIT_KEEP`` in memory,
so a long-running controller does not grow) and, when ``audit_path`` is set, all of them as JSON lines in that
file. A record whose outcome is ``failed`` is also a JSON line on stderr (the container's log). With
``events=True`` each applied action also becomes a core/v1 Event on its object.

Writes used (the ClusterRole in docs/kubernetes.md lists exactly these): pods/binding create, pods/eviction
create, pods patch (checkpoint annotation), pods create and delete (start-buffer placeholders; delete also for
gang rollback), priorityclasses create (the placeholders' class), nodes patch (cordon, idle marks),
deployments patch (replica scaling with its record, after a deployments get: optimistic concurrency; rightsizing),
events create, leases get/create/update,
and create/update of Kueue and Karpenter objects.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufleet.adapters.kubernetes.deployment_json import A_SCALED_REPLICAS, scale_record
from gpufleet.adapters.kubernetes.labels import A_CORDONED_BY, A_GPU_SLOTS, A_PARKED_AT
from gpufleet.adapters.kubernetes.rest import JSON, MERGE_PATCH, STRATEGIC_PATCH, ApiError, Kube

TRANSIENT = {0, 429, 500, 502, 503, 504}
MANAGED_BY = "app.kubernetes.io/managed-by"  # on the objects gpufleet emits (fleetobjects.py): MANAGER's
MANAGER = "gpufleet"
NOT_LEADER = "not_leader"  # the outcome of a write refused by Actuator.may_write (the Lease lost)
RETRY_AFTER_MAX_S = 30.0  # the longest Retry-After honoured before a retry (an actuator thread waits it out)
OWN_CORDON_TRIES = 3  # read-then-patch rounds when the node changed in between (409)
AUDIT_KEEP = 100_000  # audit records kept in memory


def eviction_api_version(discovery: JSON) -> str:
    """``policy/v1`` when the ``policy`` group's discovery document lists ``v1``, else ``policy/v1beta1``."""
    served = {str(v.get("version", "")) for v in discovery.get("versions") or []}
    return "policy/v1" if "v1" in served else "policy/v1beta1"


def pdb_refusal(exc: ApiError) -> bool:
    """Whether an eviction's error is a PodDisruptionBudget's refusal: 429 with the cause ``DisruptionBudget`` (the
    Eviction API's answer, 1.20 to today: "Cannot evict pod as it would violate the pod's disruption budget.", no
    Retry-After), or that message without causes. Throttling's 429 (max-in-flight, priority and fairness) carries
    ``Retry-After`` and a plain text body instead."""
    if exc.status != 429:
        return False
    return any(c.startswith("DisruptionBudget:") for c in exc.causes) or "disruption budget" in exc.message.lower()


class _NotOurs(Exception):
    """An object :meth:`Actuator.apply_object` would replace is someone else's."""


class Actuator:
    def __init__(
        self,
        kube: Kube,
        *,
        dry_run: bool = False,
        audit_path: Path | None = None,
        events: bool = False,
        retries: int = 3,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube = kube
        self.dry_run = dry_run
        self.audit_path = audit_path
        self.events = events
        self.retries = retries
        self.clock = clock
        self.sleep = sleep
        # the last audit records in memory (the file, ``audit_path``, keeps them all); ``on_record`` sees each one
        self.audit: deque[dict[str, Any]] = deque(maxlen=AUDIT_KEEP)
        self.on_record: Callable[[dict[str, Any]], None] | None = None
        # whether a write may go now (the controller's: while it leads); a write it refuses is recorded NOT_LEADER
        self.may_write: Callable[[], bool] | None = None
        self._eviction_api: str | None = None
        self._lock = threading.Lock()

    # -- audit -------------------------------------------------------------------------------------------
    def record(self, action: str, target: str, reason: str, outcome: str, **extra: Any) -> dict[str, Any]:
        ev = {"at_s": round(self.clock(), 3), "action": action, "target": target, "reason": reason,
              "outcome": outcome, "dry_run": self.dry_run, **extra}  # fmt: skip
        with self._lock:
            self.audit.append(ev)
            if self.audit_path is not None:
                with self.audit_path.open("a") as f:
                    f.write(json.dumps(ev, sort_keys=True) + "\n")
        if outcome == "failed":  # what an operator reads in the container's log
            print(json.dumps(ev, sort_keys=True, default=str), file=sys.stderr, flush=True)
        if self.on_record is not None:
            self.on_record(ev)
        return ev

    def _gated(self, action: str, target: str, reason: str, **extra: Any) -> bool:
        """Whether a write is refused now (:attr:`may_write`: the controller lost the Lease while a drain, a preemption
        or a scaling round was in flight); recorded with outcome ``not_leader``."""
        if self.dry_run or self.may_write is None or self.may_write():
            return False
        self.record(action, target, reason, NOT_LEADER, **extra)
        return True

    def _event(self, namespace: str, kind: str, name: str, reason: str, message: str) -> None:
        if not self.events or self.dry_run or (self.may_write is not None and not self.may_write()):
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{name}.gpufleet.", "namespace": namespace or "default"},
                "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
                "reason": reason, "message": message, "type": "Normal", "source": {"component": "gpufleet"},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1}  # fmt: skip
        with contextlib.suppress(ApiError):  # an event is best effort; the audit record stays
            self.kube.post(f"/api/v1/namespaces/{namespace or 'default'}/events", body)

    def _send(self, fn: Callable[[], JSON]) -> JSON:
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except ApiError as exc:
                if exc.status not in TRANSIENT or attempt == self.retries or pdb_refusal(exc):
                    raise
                wait = exc.retry_after_s
                self.sleep(delay if wait is None else max(delay, min(wait, RETRY_AFTER_MAX_S)))
                delay *= 2
        raise AssertionError("unreachable")

    def _do(self, action: str, target: str, reason: str, fn: Callable[[], JSON], **extra: Any) -> str:
        """Run (or, in dry-run, only record) one write. Returns the outcome code."""
        if self.dry_run:
            self.record(action, target, reason, "dry_run", **extra)
            return "dry_run"
        if self._gated(action, target, reason, **extra):
            return NOT_LEADER
        try:
            self._send(fn)
        except ApiError as exc:
            outcome = {404: "not_found", 409: "conflict", 422: "invalid"}.get(exc.status, "error")
            if exc.status == 429:  # a budget's refusal, or throttling that outlasted the retries
                outcome = "refused_429" if pdb_refusal(exc) else "throttled"
            if exc.causes:
                extra["causes"] = list(exc.causes)
            self.record(action, target, reason, outcome, status=exc.status, message=exc.message[:300], **extra)
            return outcome
        self.record(action, target, reason, "applied", **extra)
        return "applied"

    # -- actions -----------------------------------------------------------------------------------------
    def bind(self, namespace: str, name: str, uid: str, node: str, gpu_slots: tuple[int, ...], reason: str) -> str:
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "uid": uid, "annotations": {A_GPU_SLOTS: ",".join(map(str, gpu_slots))}},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
        out = self._do("bind", f"{namespace}/{name}", reason, lambda: self.kube.post(path, body), node=node)
        if out == "conflict" and self._bound_to(namespace, name, uid, node):
            # already bound there: our own earlier attempt, whose answer was lost and which a retry met (409)
            self.record("bind", f"{namespace}/{name}", reason, "applied", node=node, found_bound=True)
            out = "applied"
        if out == "applied":
            self._event(namespace, "Pod", name, "Scheduled", f"gpufleet bound {namespace}/{name} to {node} ({reason})")
        return out

    def _bound_to(self, namespace: str, name: str, uid: str, node: str) -> bool:
        try:
            pod = self.kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError:
            return False
        return pod["metadata"].get("uid") == uid and (pod.get("spec") or {}).get("nodeName") == node

    def delete_pod(self, namespace: str, name: str, reason: str) -> str:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        return self._do("delete_pod", f"{namespace}/{name}", reason, lambda: self.kube.delete(path))

    def cordon(self, node: str, reason: str, *, on: bool = True) -> str:
        body = {"spec": {"unschedulable": on}}
        act = "cordon" if on else "uncordon"
        return self._do(act, node, reason, lambda: self.kube.patch(f"/api/v1/nodes/{node}", body))

    def _read_node(self, node: str) -> JSON | None:
        """The Node, by a list with a field selector (the ClusterRole lists nodes; it does not get them); None when
        there is none of that name."""
        items = self._send(lambda: self.kube.get("/api/v1/nodes", fieldSelector=f"metadata.name={node}"))
        found = [n for n in items.get("items") or [] if (n.get("metadata") or {}).get("name") == node]
        return found[0] if found else None

    def _own_cordon(self, node: str, reason: str, on: bool) -> str:
        """Cordon (``on``) a schedulable node as gpufleet's own (the mark, and when: ``gpufleet.io/parked-at``, the
        actuator's clock), or undo a cordon that carries gpufleet's mark (both annotations removed): read
        the node, then one merge patch with the ``metadata.resourceVersion`` read (the API server answers 409 when
        the node changed in between: read again, up to ``OWN_CORDON_TRIES``). A node already cordoned is
        ``cordoned_by_other`` (not cordoned again); a cordon without the mark (an administrator's) or none at all
        is ``not_ours`` (not undone)."""
        action = "cordon" if on else "uncordon"
        if self.dry_run:
            self.record(action, node, reason, "dry_run")
            return "dry_run"
        if self._gated(action, node, reason):
            return NOT_LEADER
        outcome, extra = "conflict", {}
        for _ in range(OWN_CORDON_TRIES):
            try:
                got = self._read_node(node)
            except ApiError as exc:
                outcome, extra = "error", {"status": exc.status, "message": exc.message[:300]}
                break
            if got is None:
                outcome, extra = "not_found", {}
                break
            meta = got.get("metadata") or {}
            cordoned = bool((got.get("spec") or {}).get("unschedulable", False))
            mark = (meta.get("annotations") or {}).get(A_CORDONED_BY)
            if on and cordoned:
                outcome, extra = "cordoned_by_other", {"marked": mark is not None}
                break
            if not on and (not cordoned or mark is None):
                outcome, extra = "not_ours", {"cordoned": cordoned}
                break
            parked_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock())) if on else None
            body = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                                 "annotations": {A_CORDONED_BY: reason if on else None, A_PARKED_AT: parked_at}},
                    "spec": {"unschedulable": on}}  # fmt: skip
            try:
                self._send(functools.partial(self.kube.patch, f"/api/v1/nodes/{node}", body))
            except ApiError as exc:
                if exc.status == 409:
                    continue
                outcome = {404: "not_found", 422: "invalid"}.get(exc.status, "error")
                extra = {"status": exc.status, "message": exc.message[:300]}
                break
            outcome, extra = "applied", {}
            break
        self.record(action, node, reason, outcome, **extra)
        return outcome

    def cordon_own(self, node: str, reason: str) -> str:
        """Cordon ``node`` if it is schedulable now, marked as gpufleet's (annotation ``gpufleet.io/cordoned-by``:
        the reason), so that :meth:`uncordon_own` undoes only this cordon. Returns ``applied`` | ``dry_run`` |
        ``cordoned_by_other`` (someone else's cordon: left as it is) | ``not_found`` | ``conflict`` | ``error``."""
        return self._own_cordon(node, reason, True)

    def uncordon_own(self, node: str, reason: str) -> str:
        """Undo gpufleet's own cordon (:meth:`cordon_own`): only while the node is cordoned and carries the mark (an
        administrator who wants it kept cordoned removes the annotation). Returns ``applied`` | ``dry_run`` |
        ``not_ours`` (not cordoned, or not by gpufleet: left as it is) | ``not_found`` | ``conflict`` | ``error``."""
        return self._own_cordon(node, reason, False)

    def own_cordon_now(self, node: str) -> str:
        """Whether ``node`` carries gpufleet's own cordon now (read from the API server, nothing written): ``ours``
        (cordoned, with the mark) | ``not_ours`` (schedulable, or an administrator's cordon) | ``not_found`` |
        ``error``."""
        try:
            got = self._read_node(node)
        except ApiError:
            return "error"
        if got is None:
            return "not_found"
        cordoned = bool((got.get("spec") or {}).get("unschedulable", False))
        mark = ((got.get("metadata") or {}).get("annotations") or {}).get(A_CORDONED_BY)
        return "ours" if cordoned and mark is not None else "not_ours"

    def delete_node(self, node: str, reason: str) -> str:
        """Delete a Node object (Karpenter's termination finalizer then terminates its instance)."""
        return self._do("delete_node", node, reason, lambda: self.kube.delete(f"/api/v1/nodes/{node}"))

    def eviction_api(self) -> str:
        """The Eviction version to send: ``policy/v1`` where the API server serves it (1.22+), else
        ``policy/v1beta1`` (1.20, 1.21), asked once by discovery, as kubectl does; a discovery that fails is asked
        again next time (``policy/v1beta1`` meanwhile)."""
        if self._eviction_api is None:
            try:
                self._eviction_api = eviction_api_version(self.kube.get("/apis/policy"))
            except ApiError:
                return "policy/v1beta1"
        return self._eviction_api

    def evict(
        self, namespace: str, name: str, reason: str, grace_s: int | None = None, *, uid: str | None = None
    ) -> str:
        """Evict through the Eviction API (PodDisruptionBudgets apply). ``grace_s`` None: the pod's own
        ``terminationGracePeriodSeconds``, as ``kubectl drain`` and kube-scheduler's preemption leave it (a serving
        pod that drains its requests for five minutes keeps its five minutes); else that many seconds. ``uid``: only
        that very pod (a precondition: another pod under the name since is a ``conflict``, not evicted). Outcome
        ``refused_429``: its PodDisruptionBudget refused (:func:`pdb_refusal`; posted once); ``throttled``: the API
        server still throttled it after the retries."""
        body: JSON = {"apiVersion": self.eviction_api(), "kind": "Eviction",
                      "metadata": {"name": name, "namespace": namespace}}  # fmt: skip
        options: JSON = {}
        if grace_s is not None:
            options["gracePeriodSeconds"] = grace_s
        if uid:
            options["preconditions"] = {"uid": uid}
        if options:
            body["deleteOptions"] = options
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        out = self._do("evict", f"{namespace}/{name}", reason, lambda: self.kube.post(path, body))
        if out == "applied":
            self._event(namespace, "Pod", name, "Evicted", f"gpufleet evicted {namespace}/{name} ({reason})")
        return out

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str], reason: str) -> str:
        body = {"metadata": {"annotations": annotations}}
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        return self._do("annotate", f"{namespace}/{name}", reason, lambda: self.kube.patch(path, body), **annotations)

    def scale(
        self,
        namespace: str,
        name: str,
        replicas: int,
        reason: str,
        *,
        expect: int | None = None,
        record_only: bool = False,
    ) -> str:
        """Set Deployment ``namespace/name``'s replicas, with optimistic concurrency: the Deployment is read (its
        ``spec.replicas`` and ``resourceVersion``) and one merge patch of the Deployment carries that
        ``resourceVersion`` (the API server answers 409 when the Deployment changed in between: read again, up to
        ``OWN_CORDON_TRIES``), the replicas and, in the same update, gpufleet's record of its write (the annotation
        ``gpufleet.io/scaled-replicas``, ``deployment_json.scale_record``: what a new leader compares the replicas
        with). ``expect``: the replicas the decision was made from; replicas found other than those are someone
        else's change (a human's ``kubectl scale``, an HPA): not overwritten, outcome ``conflict`` with
        ``replicas_now``. A Deployment that is gone is ``not_found``. ``record_only``: the replicas are already
        ``replicas`` (a decision that changes nothing) and only the record is brought up to them (outcome
        ``recorded``)."""
        target = f"{namespace}/{name}"
        if self.dry_run:
            self.record("scale", target, reason, "dry_run", replicas=replicas)
            return "dry_run"
        if self._gated("scale", target, reason, replicas=replicas):
            return NOT_LEADER
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
        outcome, extra = "conflict", {}
        for _ in range(OWN_CORDON_TRIES):
            try:
                dep = self._send(lambda: self.kube.get(path))
                now = int((dep.get("spec") or {}).get("replicas", 1) or 0)
                if expect is not None and now != expect:
                    self.record(
                        "scale", target, reason, "conflict", replicas=replicas, replicas_now=now, expected=expect
                    )
                    return "conflict"
                body = {
                    "metadata": {
                        "resourceVersion": dep["metadata"]["resourceVersion"],
                        "annotations": {A_SCALED_REPLICAS: scale_record(replicas, self.clock())},
                    },
                    "spec": {"replicas": replicas},
                }
                self._send(functools.partial(self.kube.patch, path, body, MERGE_PATCH))
            except ApiError as exc:
                if exc.status == 409:
                    outcome, extra = "conflict", {"status": 409, "message": exc.message[:300]}
                    continue  # the Deployment changed between the read and the write: read it again
                outcome = {404: "not_found", 422: "invalid", 429: "throttled"}.get(exc.status, "error")
                extra = {"status": exc.status, "message": exc.message[:300]}
                break
            done = "recorded" if record_only else "applied"
            self.record("scale", target, reason, done, replicas=replicas)
            return done
        self.record("scale", target, reason, outcome, replicas=replicas, **extra)
        return outcome

    def patch_requests(
        self, namespace: str, name: str, requests: dict[str, dict[str, str]], previous: str, reason: str
    ) -> str:
        """Set container requests on a Deployment's template (``requests``: container -> resource -> qty);
        ``previous`` (JSON of the old requests) is kept in an annotation so a rollback can restore it."""
        body = {
            "metadata": {"annotations": {"gpufleet.io/rightsizing-previous": previous}},
            "spec": {"template": {"spec": {"containers": [
                {"name": c, "resources": {"requests": r}} for c, r in sorted(requests.items())
            ]}}},
        }  # fmt: skip
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
        return self._do(
            "patch_requests", f"{namespace}/{name}", reason, lambda: self.kube.patch(path, body, STRATEGIC_PATCH)
        )

    def create(
        self, path: str, obj: JSON, action: str, target: str, reason: str, *, class_wait_s: float = 0.0, **extra: Any
    ) -> str:
        """Create ``obj`` in collection ``path`` (outcome ``conflict`` if it exists). ``class_wait_s``: retry for
        that long a 403 naming a PriorityClass (the API server's admission reads classes from a cache that lags
        one just created)."""

        def go() -> JSON:
            deadline = time.monotonic() + class_wait_s
            while True:
                try:
                    return self.kube.post(path, obj)
                except ApiError as exc:
                    if exc.status != 403 or "PriorityClass" not in exc.message or time.monotonic() >= deadline:
                        raise
                    self.sleep(0.2)

        return self._do(action, target, reason, go, **extra)

    def apply_object(self, path: str, obj: JSON, reason: str, *, adopt: bool = False) -> str:
        """Create ``obj`` in collection ``path``, or, if it exists, replace its spec with ``obj``'s: a PUT of the object
        read (its resourceVersion: 409 if it changed in between), so what others keep on its metadata stays
        (finalizers such as Kueue's ``resource-in-use``, owner references, their labels and annotations) and
        ``obj``'s labels and annotations are set over it. An existing object without gpufleet's label
        (``app.kubernetes.io/managed-by: gpufleet``) is someone else's of the same name: left as it is, outcome
        ``not_ours`` (``adopt``: replaced all the same, and labelled gpufleet's from then on). A dry run reads the
        object and says what the apply would do (:meth:`_dry_apply`), ``not_ours`` included."""
        name = obj["metadata"]["name"]
        target = f"{obj.get('kind')}/{name}"
        if self.dry_run:
            return self._dry_apply(path, name, target, reason, adopt)

        def go() -> JSON:
            try:
                return self.kube.post(path, obj)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                cur = self.kube.get(f"{path}/{name}")
                meta = dict(cur.get("metadata") or {})
                if (meta.get("labels") or {}).get(MANAGED_BY) != MANAGER and not adopt:
                    raise _NotOurs from None
                mine = obj["metadata"]
                meta["labels"] = {**(meta.get("labels") or {}), **(mine.get("labels") or {}), MANAGED_BY: MANAGER}
                if mine.get("annotations") or meta.get("annotations"):
                    meta["annotations"] = {**(meta.get("annotations") or {}), **(mine.get("annotations") or {})}
                meta.pop("managedFields", None)
                new = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
                return self.kube.put(f"{path}/{name}", {**new, "metadata": meta})

        try:
            return self._do("apply", target, reason, go)
        except _NotOurs:
            self._not_ours(target, reason)
            return "not_ours"

    def _dry_apply(self, path: str, name: str, target: str, reason: str, adopt: bool) -> str:
        """What :meth:`apply_object` would do, read and not written: ``would`` ``create`` (no such object) or
        ``replace`` (gpufleet's, or ``adopt``), outcome ``dry_run``; or ``not_ours``, as the apply would answer. An
        object that cannot be read is outcome ``dry_run`` with ``would`` ``unknown`` and the error."""
        try:
            cur = self._send(lambda: self.kube.get(f"{path}/{name}"))
        except ApiError as exc:
            if exc.status == 404:
                self.record("apply", target, reason, "dry_run", would="create")
            else:
                self.record("apply", target, reason, "dry_run", would="unknown", status=exc.status,
                            message=exc.message[:300])  # fmt: skip
            return "dry_run"
        if ((cur.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) != MANAGER and not adopt:
            self._not_ours(target, reason)
            return "not_ours"
        self.record("apply", target, reason, "dry_run", would="replace")
        return "dry_run"

    def _not_ours(self, target: str, reason: str) -> None:
        self.record("apply", target, reason, "not_ours",
                    message=f"{target} exists without the label {MANAGED_BY}={MANAGER}: someone else's object of "
                    "that name, left as it is (--adopt: replace it and manage it from then on)")  # fmt: skip

    def merge_patch_strategic(self, path: str, body: JSON, target: str) -> str:
        return self._do(
            "rollback_requests", target, "rightsizing_rollback", lambda: self.kube.patch(path, body, STRATEGIC_PATCH)
        )

    def merge_patch(self, path: str, body: JSON, action: str, target: str, reason: str, **extra: Any) -> str:
        return self._do(action, target, reason, lambda: self.kube.patch(path, body, MERGE_PATCH), **extra)
