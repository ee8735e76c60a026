"""The provider port (where reservations are bought) and a simulated provider behind it.

Contract of :class:`ProviderPort`: ``submit(key, order)`` is idempotent on ``key`` -- a second call with the
same key returns the first order and buys nothing more. A :class:`ProviderTimeout` means "unknown outcome":
the order may or may not exist; callers retry with the SAME key or ask ``find(key)``. A :class:`ProviderRefused`
means the provider answered "no" (e.g. ``InsufficientInstanceCapacity``): nothing was bought.

A provider whose orders have a lifecycle of their own (a real cloud) also implements :class:`ProviderLifecycle`:
``describe(order_ids)`` reports each order's state as the provider sees it, and the reconciler follows that
state instead of the clock. The simulated provider does not, so its reservations follow the clock. ``describe`` is
given gpufleet's own record of each order (:class:`OrderRecord`: the term's end, the provider operation still running
when the order was submitted): the record decides what gpufleet does (when it ends an order the provider bills until
deleted); the provider's own metadata (tags anyone may edit) is only cross-checked, a disagreement reported.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.adapters.sql.engine import writer
from gpufleet.adapters.sql.models import SimProviderOrderRow
from gpufleet.domain.errors import GpufleetError


class ProviderTimeout(GpufleetError):
    """The provider did not answer in time; the order may or may not have been placed."""

    http_status = 504  # the API answers a provider that never answered as a gateway timeout


class ProviderRefused(GpufleetError):
    """The provider refused the order (nothing was bought). ``code`` is the provider's error code;
    ``retryable``: the refusal is about the moment (no capacity now), not the order (a bad parameter); ``blocked``: a
    permission, a policy or an authentication on gpufleet's side refuses it (an operator fixes it: the order is held,
    never cancelled for it, and tried again on each pass; implies ``retryable``)."""

    http_status = 502  # the API answers an upstream refusal as a bad gateway, with the provider's code

    def __init__(self, code: str, message: str, *, retryable: bool = False, blocked: bool = False) -> None:
        self.code = code
        self.message = message
        self.retryable = retryable or blocked
        self.blocked = blocked
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True, slots=True)
class OrderRequest:
    sku_id: str
    region_id: str
    units: int
    term_months: int
    start_s: int


@dataclass(frozen=True, slots=True)
class ProviderOrder:
    order_id: str
    idempotency_key: str
    sku_id: str
    region_id: str
    units: int
    term_months: int
    start_s: int
    # the provider's operation still running when ``submit`` answered (GCP's zonal operation): its outcome is the
    # order's until it ends (``describe`` is given it back through :class:`OrderRecord`)
    operation_id: str | None = None


class ProviderPort(Protocol):
    def submit(self, key: str, order: OrderRequest) -> ProviderOrder: ...

    def find(self, key: str) -> ProviderOrder | None: ...


LifecycleState = Literal["pending", "active", "expired", "cancelled", "failed"]


@dataclass(frozen=True, slots=True)
class OrderState:
    """An order's state at the provider: ``state`` is the lifecycle stage, ``provider_state`` the provider's own
    word for it (e.g. EC2's ``payment-pending``), ``reason`` any explanation the provider gave. ``failed``: the
    order's operation failed after ``submit`` answered (nothing is held), ``refusal`` says why as a refusal at
    submission would (about the moment, blocked, or of the order). ``warning``: what the provider's answer says
    against gpufleet's record (reported, not obeyed). ``ended``: the adapter itself ended the order at the provider
    (deleted or cancelled it, state ``expired``) because the term in gpufleet's record is over while the provider
    still held it (Azure holds no end; an end removed or moved later at GCP or AWS): what it found there and did,
    audited by the service (``reservation.ended_at_term``)."""

    order_id: str
    state: LifecycleState
    provider_state: str
    reason: str = ""
    refusal: ProviderRefused | None = None
    warning: str = ""
    ended: str = ""


def cancel_undelivered(
    cancel: Callable[[], object], oid: str, word: str, found: str, warning: str, *, verb: str = "cancel", note: str = ""
) -> OrderState:
    """End an order still pending at its recorded term's end (``found``: what the provider holds): whatever it would
    deliver later is outside the approved term, so ``cancel()`` it. Refused or unanswered: still ``pending``, the
    failure (with ``note``, e.g. what a person must accept) added to the warning, tried again on each pass."""
    try:
        cancel()
    except (ProviderRefused, ProviderTimeout) as exc:
        said = exc.code if isinstance(exc, ProviderRefused) else "unanswered"
        failed = f"{found}; gpufleet's {verb} failed ({said}){note}: tried again on each pass"
        return OrderState(oid, "pending", word, f"term over, {verb} failed",
                          warning="; ".join(w for w in (warning, failed) if w))  # fmt: skip
    done = "deleted" if verb == "delete" else "cancelled"
    return OrderState(oid, "cancelled", word, "never delivered within the recorded term: cancelled by gpufleet",
                      warning=warning, ended=f"{found}: {done} by gpufleet")  # fmt: skip


@dataclass(frozen=True, slots=True)
class OrderRecord:
    """gpufleet's own record of an order, given to ``describe``: when its term ends (the store's start + term), the
    provider operation still running when it was submitted (None: none), the region it was placed in, what was
    approved (the SKU and its GPUs; "" and 0: not known) and when its term starts (None: not known), which the
    provider's answer is checked against."""

    end_s: int
    operation_id: str | None = None
    region: str = ""
    sku_id: str = ""
    units: int = 0
    start_s: int | None = None


@runtime_checkable
class ProviderLifecycle(Protocol):
    def describe(
        self, order_ids: Sequence[str], records: Mapping[str, OrderRecord] | None = None
    ) -> dict[str, OrderState]:
        """States of the given orders; an order the provider does not know is absent from the answer. ``records``:
        gpufleet's record of each order (by order id), which decides over the provider's metadata."""
        ...


@runtime_checkable
class SubmitWindow(Protocol):
    def earliest_submit_s(self, order: OrderRequest) -> int:
        """The first moment the provider can take the order (e.g. Azure takes a future start at most about six
        months ahead); before it, the order stays approved and is submitted by a later reconciler pass."""
        ...


@runtime_checkable
class WholeMachines(Protocol):
    def units_bought(self, sku_id: str, units: int) -> int:
        """The GPUs an order of ``units`` GPUs reserves at the provider: clouds reserve whole machines (AWS
        instances, GCP and Azure VMs), so 1 H100 is a whole 8-GPU machine. A SKU the provider does not map: ``units``
        (its order is refused at submission anyway)."""
        ...


Fault = Literal["timeout_before_order", "timeout_after_order"]


class SimulatedProvider:
    """A cloud provider simulated in its own table, committed independently of the service's transactions.

    ``inject(fault)`` queues a fault for the next ``submit`` call: ``timeout_before_order`` times out
    without placing the order; ``timeout_after_order`` places it and then loses the answer (the case that
    buys twice without idempotency keys). ``calls`` counts submit calls. ``latency_s``: how long each answer
    takes after the order is placed (a real provider's API takes seconds; failover drills kill a leader there).
    """

    def __init__(self, engine: Engine, *, latency_s: float = 0.0) -> None:
        self._engine = writer(engine)
        self._latency_s = latency_s
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self.calls = 0

    def inject(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            self.calls += 1
            return self._faults.popleft() if self._faults else None

    def submit(self, key: str, order: OrderRequest) -> ProviderOrder:
        fault = self._next_fault()
        if fault == "timeout_before_order":
            raise ProviderTimeout(f"provider did not answer for {key}")
        existing = self.find(key)
        if existing is None:
            existing = self._place(key, order)
        if self._latency_s > 0:
            time.sleep(self._latency_s)
        if fault == "timeout_after_order":
            raise ProviderTimeout(f"provider did not answer for {key}")
        return existing

    def _place(self, key: str, order: OrderRequest) -> ProviderOrder:
        with Session(self._engine) as session:
            row = SimProviderOrderRow(
                idempotency_key=key,
                order_id="ord_" + hashlib.sha256(key.encode()).hexdigest()[:16],
                sku_id=order.sku_id,
                region_id=order.region_id,
                units=order.units,
                term_months=order.term_months,
                start_s=order.start_s,
                created_at_s=order.start_s,
            )
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
                found = self.find(key)
                assert found is not None
                return found
            return _order(row)

    def find(self, key: str) -> ProviderOrder | None:
        with Session(self._engine) as session:
            row = session.get(SimProviderOrderRow, key)
            return _order(row) if row is not None else None

    def orders(self) -> list[ProviderOrder]:
        with Session(self._engine) as session:
            rows = session.scalars(select(SimProviderOrderRow).order_by(SimProviderOrderRow.order_id)).all()
            return [_order(r) for r in rows]


def _order(row: SimProviderOrderRow) -> ProviderOrder:
    return ProviderOrder(
        row.order_id, row.idempotency_key, row.sku_id, row.region_id, row.units, row.term_months, row.start_s
    )
