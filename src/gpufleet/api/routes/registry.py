"""CRUD routes for the registries (admins write, every role reads).

The route functions are generated per kind; their body and response types are the kind's schemas.
"""

from typing import Any

from fastapi import APIRouter, Query, Response

from gpufleet.api.deps import CurrentActor, ServicesDep
from gpufleet.api.problems import PROBLEM_RESPONSES
from gpufleet.api.schemas import (
    ClusterCreate,
    ClusterPublic,
    NodeCreate,
    NodePublic,
    NodeUpdate,
    PoolCreate,
    PoolPublic,
    PoolUpdate,
    ProviderCreate,
    ProviderPublic,
    RegionCreate,
    RegionPublic,
    SkuCreate,
    SkuPublic,
    TeamCreate,
    TeamPublic,
    TenantCreate,
    TenantPublic,
)
from gpufleet.api.types import ID_PATTERN, Limit, Offset
from gpufleet.api.types import IdPath as IdPathT
from gpufleet.api.types import PoolIdPath as PoolIdPathT
from gpufleet.domain.errors import ValidationError

router = APIRouter(tags=["registries"], responses=PROBLEM_RESPONSES)


def _crud(
    plural: str,
    kind: str,
    create: type,
    public: type,
    update: type | None = None,
    *,
    pool_ids: bool = False,
    filters: tuple[str, ...] = (),
) -> None:
    one = f"/v1/{plural}/{{ident:path}}" if pool_ids else f"/v1/{plural}/{{ident}}"
    IdPath = PoolIdPathT if pool_ids else IdPathT  # noqa: N806

    @router.post(
        f"/v1/{plural}", status_code=201, response_model=public, name=f"create_{kind}", summary=f"Create a {kind}"
    )
    def create_fn(body: create, services: ServicesDep, actor: CurrentActor) -> Any:  # type: ignore[valid-type]
        return services.registry.create(actor, kind, body.model_dump())  # type: ignore[attr-defined]

    @router.get(f"/v1/{plural}", response_model=list[public], name=f"list_{plural}", summary=f"List {plural}")  # type: ignore[valid-type]
    def list_fn(
        services: ServicesDep,
        actor: CurrentActor,
        limit: Limit = 100,
        offset: Offset = 0,
        sku_id: str | None = Query(
            default=None, pattern=r"^[a-z0-9][a-z0-9_]{0,63}$", include_in_schema="sku_id" in filters
        ),
        region_id: str | None = Query(default=None, pattern=ID_PATTERN, include_in_schema="region_id" in filters),
        cluster_id: str | None = Query(default=None, pattern=ID_PATTERN, include_in_schema="cluster_id" in filters),
        team_id: str | None = Query(default=None, pattern=ID_PATTERN, include_in_schema="team_id" in filters),
    ) -> Any:
        given = {"sku_id": sku_id, "region_id": region_id, "cluster_id": cluster_id, "team_id": team_id}
        for name, value in given.items():  # a filter this list does not apply is refused, never ignored
            if value is not None and name not in filters:
                offered = ", ".join(filters) or "none"
                raise ValidationError(name, f"GET /v1/{plural} does not filter by {name} (its filters: {offered})")
        return services.registry.list(
            actor, kind, limit=limit, offset=offset, filters={k: v for k, v in given.items() if k in filters}
        )

    @router.get(one, response_model=public, name=f"get_{kind}", summary=f"Get a {kind}")
    def get_fn(ident: IdPath, services: ServicesDep, actor: CurrentActor) -> Any:  # type: ignore[valid-type]
        return services.registry.get(actor, kind, ident)

    @router.delete(one, status_code=204, name=f"delete_{kind}", summary=f"Delete a {kind}")
    def delete_fn(ident: IdPath, services: ServicesDep, actor: CurrentActor) -> Response:  # type: ignore[valid-type]
        services.registry.delete(actor, kind, ident)
        return Response(status_code=204)

    if update is not None:

        @router.patch(one, response_model=public, name=f"update_{kind}", summary=f"Update a {kind}")
        def update_fn(ident: IdPath, body: update, services: ServicesDep, actor: CurrentActor) -> Any:  # type: ignore[valid-type]
            return services.registry.update(actor, kind, ident, body.model_dump(exclude_unset=True))  # type: ignore[attr-defined]


_crud("skus", "sku", SkuCreate, SkuPublic)
_crud("providers", "provider", ProviderCreate, ProviderPublic)
_crud("regions", "region", RegionCreate, RegionPublic)
_crud("pools", "pool", PoolCreate, PoolPublic, PoolUpdate, pool_ids=True, filters=("sku_id", "region_id"))
_crud("clusters", "cluster", ClusterCreate, ClusterPublic)
_crud("nodes", "node", NodeCreate, NodePublic, NodeUpdate, filters=("cluster_id",))
_crud("teams", "team", TeamCreate, TeamPublic)
_crud("tenants", "tenant", TenantCreate, TenantPublic, filters=("team_id",))
