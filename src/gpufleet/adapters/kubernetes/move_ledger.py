"""The ledger of consolidation's moves, kept on the Lease's Namespace so that it outlives a leader
(``control/move_budget.py`` decides with it).

The annotation ``gpufleet.io/consolidation-moves`` on the Namespace of the controller's Lease (``--lease-namespace``,
``kube-system`` by default; not on the Lease, whose renewals every few seconds would clash with it) lists the moves of
the last hour, each as an RFC 3339 UTC time, comma-separated. It is read every consolidation round, and written with
the Namespace's ``resourceVersion`` (a 409 is read again, up to three times) before a round evicts (its planned moves
reserved) and after (the moves not made given back); each write is audited (action ``moves``). A ledger that cannot be
read leaves the round to its own evictions (audited ``consolidate`` ``moves_unreadable``); entries that do not read as
times are ignored. Who can edit the Namespace (cluster administrators, for ``kube-system``) can edit the ledger: the
trust of the ``--max-moves-per-hour`` flag itself. A dry run reads it and writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.rest import ApiError
from gpufleet.control.observation import rfc3339_s

A_MOVES = "gpufleet.io/consolidation-moves"
TRIES = 3


def ledger_times(raw: object) -> list[int]:
    """The move times (Unix seconds) of an annotation's value; entries that do not read as times are left out."""
    if not isinstance(raw, str):
        return []
    out = []
    for part in raw.split(","):
        t = rfc3339_s(part.strip())
        if t is not None:
            out.append(int(t))
    return out


def ledger_value(times: list[int]) -> str:
    return ",".join(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) for t in times)


class MoveLedger:
    """The moves ledger on Namespace ``namespace``, read and written through ``act`` (its audit, dry run, Lease gate)."""

    def __init__(self, act: Actuator, namespace: str) -> None:
        self.act = act
        self.path = f"/api/v1/namespaces/{namespace}"
        self.target = f"namespace/{namespace}"

    def read(self) -> list[int] | None:
        """The ledger's move times; None when the Namespace cannot be read (audited ``moves_unreadable``)."""
        try:
            ns = self.act.kube.get(self.path)
        except ApiError as exc:
            self.act.record("consolidate", self.target, "moves_unreadable", "error", status=exc.status,
                            message=exc.message[:300])  # fmt: skip
            return None
        return ledger_times(((ns.get("metadata") or {}).get("annotations") or {}).get(A_MOVES))

    def update(self, change: Callable[[list[int]], list[int]], reason: str) -> str:
        """Write ``change(times read)`` with the Namespace's resourceVersion (a conflict is read again); the outcome
        of the last write (nothing in a dry run: ``dry_run``)."""
        if self.act.dry_run:
            return "dry_run"
        out = "conflict"
        for _ in range(TRIES):
            try:
                ns = self.act.kube.get(self.path)
            except ApiError as exc:
                self.act.record("moves", self.target, reason, "error", status=exc.status, message=exc.message[:300])
                return "error"
            meta = ns.get("metadata") or {}
            times = change(ledger_times((meta.get("annotations") or {}).get(A_MOVES)))
            body = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                                 "annotations": {A_MOVES: ledger_value(times)}}}  # fmt: skip
            out = self.act.merge_patch(self.path, body, "moves", self.target, reason, moves=len(times))
            if out != "conflict":
                return out
        return out
