"""The error tree of gpufleet. Every error a user can cause says what and where.

GpufleetError
 +-- ValidationError        bad input; ``field`` names the offending field (and ``location`` the file/line)
 +-- NotFoundError          an id that does not exist
 +-- ConflictError          a state that changed under you (stale version, duplicate key)
 |    +-- InvalidTransition a lifecycle edge that the transition table does not allow
 +-- PermissionDenied       an actor without the role or team for the action
 +-- CapacityUnavailable    a pool that cannot serve (quota, stockout); decisions fall back, never raise
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Base of every error gpufleet raises on purpose."""


class ValidationError(GpufleetError):
    """Input that breaks a rule. ``field`` is a dotted path such as ``pools[2].price_usd_per_gpu_h``."""

    def __init__(self, field: str, message: str, location: str | None = None) -> None:
        self.field = field
        self.message = message
        self.location = location
        where = f"{location}: " if location else ""
        super().__init__(f"{where}{field}: {message}")


class NotFoundError(GpufleetError):
    def __init__(self, kind: str, ident: str) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"{kind} {ident!r} not found")


class ConflictError(GpufleetError):
    """The request is valid but conflicts with the current state."""


class InvalidTransition(ConflictError):
    def __init__(self, entity: str, current: str, target: str) -> None:
        self.entity = entity
        self.current = current
        self.target = target
        super().__init__(f"{entity}: transition {current} -> {target} is not allowed")


class PermissionDenied(GpufleetError):
    pass


class CapacityUnavailable(GpufleetError):
    def __init__(self, pool_id: str, reason: str) -> None:
        self.pool_id = pool_id
        self.reason = reason
        super().__init__(f"pool {pool_id}: {reason}")
