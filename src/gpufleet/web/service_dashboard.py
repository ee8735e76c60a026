"""The FinOps dashboard on the running service: data from the store through the cost package, and the API's own
bearer tokens and roles.

``mount_service_dashboard(app, services, finops)`` mounts :func:`gpufleet.web.mount_dashboard` at ``/ui`` with

* a data provider that views :meth:`FinOpsService.snapshot` (the last 7 days, memoized a few seconds) through
  :class:`CostDashboardData`;
* a viewer dependency that authenticates exactly like the API: ``Authorization: Bearer <token>`` (the pages keep
  the token in the tab's ``sessionStorage`` and send it on every data call; a sign-in box asks for it on 401).
  ``app_team`` tokens get ``Scope(their team)``; ``finops_admin``, ``ml_platform_admin`` and ``viewer`` see the
  fleet. No or a bad token is a 401 with ``WWW-Authenticate: Bearer``.
"""

# No ``from __future__ import annotations``: FastAPI must see the viewer's real ``Annotated`` types.
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException

from gpufleet.service.auth import Role, Unauthenticated
from gpufleet.service.bootstrap import Services
from gpufleet.service.finops import FinOpsService
from gpufleet.web.dashboard import mount_dashboard
from gpufleet.web.data import CostDashboardData, Scope

WINDOW_S = 7 * 86_400


class ServiceDashboardData:
    """:class:`DashboardData` over the service's store (each call reads the memoized snapshot)."""

    def __init__(self, finops: FinOpsService, window_s: int = WINDOW_S) -> None:
        self._finops = finops
        self._window_s = window_s

    def _data(self) -> CostDashboardData:
        return CostDashboardData(self._finops.snapshot(self._window_s))

    def overview(self, scope: Scope) -> dict[str, Any]:
        return self._data().overview(scope)

    def breakdown(self, dim: str, scope: Scope) -> dict[str, Any]:
        return self._data().breakdown(dim, scope)

    def breakdown_csv(self, dim: str, scope: Scope) -> str:
        return self._data().breakdown_csv(dim, scope)

    def reservations(self, scope: Scope) -> dict[str, Any]:
        return self._data().reservations(scope)

    def forecast(self, scope: Scope) -> dict[str, Any]:
        return self._data().forecast(scope)

    def opportunities(self, scope: Scope) -> dict[str, Any]:
        return self._data().opportunities(scope)


def mount_service_dashboard(app: FastAPI, services: Services, finops: FinOpsService, prefix: str = "/ui") -> None:
    def viewer(authorization: Annotated[str | None, Header()] = None) -> Scope:
        """Sync, so FastAPI runs it in a worker thread (a token cache miss reads the database)."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HTTPException(401, detail="sign in with a gpufleet API token", headers={"WWW-Authenticate": "Bearer"})
        try:
            actor = services.auth.actor_for(token.strip())
        except Unauthenticated as exc:
            raise HTTPException(401, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}) from None
        return Scope(actor.team_id) if actor.role is Role.APP_TEAM else Scope(None)

    mount_dashboard(app, ServiceDashboardData(finops), prefix=prefix, viewer=viewer)
