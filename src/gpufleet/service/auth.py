"""Bearer API tokens and roles.

Tokens are 256-bit random strings shown once at creation; only their SHA-256 is stored (a fast hash is
right for high-entropy secrets; no password stretching is needed). Roles:

- ``finops_admin``: spend -- reservations (create, approve), costs of every team, audit log.
- ``ml_platform_admin``: fleet -- registries, clusters, pools, reservations (create, approve), workloads.
- ``app_team``: its own team only -- creates and reads its workloads and their costs, asks for placement.
- ``viewer``: reads everything a viewer may see; writes nothing.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Engine, select

from gpufleet.adapters.sql.models import ApiTokenRow
from gpufleet.domain.errors import GpufleetError, NotFoundError, PermissionDenied, ValidationError
from gpufleet.service.clock import Clock, IdGenerator
from gpufleet.service.uow import UnitOfWork

TOKEN_PREFIX = "gft_"


class Role(StrEnum):
    FINOPS_ADMIN = "finops_admin"
    ML_PLATFORM_ADMIN = "ml_platform_admin"
    APP_TEAM = "app_team"
    VIEWER = "viewer"


ADMINS = frozenset({Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN})
APPROVER_ROLES = ADMINS


class Unauthenticated(GpufleetError):
    """No token, or a token that is unknown or revoked."""


@dataclass(frozen=True, slots=True)
class Actor:
    user_id: str
    role: Role
    team_id: str | None

    def require(self, *roles: Role) -> None:
        if self.role not in roles:
            allowed = ", ".join(r.value for r in roles)
            raise PermissionDenied(f"role {self.role.value} may not do this (allowed: {allowed})")

    def require_team(self, team_id: str) -> None:
        """app_team actors act only on their own team; every other role passes."""
        if self.role is Role.APP_TEAM and self.team_id != team_id:
            raise PermissionDenied(f"team {self.team_id!r} may not access team {team_id!r}")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    engine: Engine, clock: Clock, ids: IdGenerator, *, role: str, user_id: str, team_id: str | None
) -> tuple[str, str]:
    """Create a token; returns (token shown once, token id). app_team tokens must name a team."""
    try:
        parsed = Role(role)
    except ValueError:
        raise ValidationError("role", f"must be one of {', '.join(r.value for r in Role)}, got {role!r}") from None
    if parsed is Role.APP_TEAM and not team_id:
        raise ValidationError("team", "an app_team token must name its team (--team)")
    if not user_id or len(user_id) > 128:
        raise ValidationError("user", "must be 1..128 characters")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = ids.new("tok")
    with UnitOfWork(engine, write=True) as uow:
        uow.session.add(
            ApiTokenRow(
                id=token_id,
                token_hash=hash_token(token),
                user_id=user_id,
                role=parsed.value,
                team_id=team_id,
                created_at_s=clock.now_s(),
                revoked=False,
            )
        )
        uow.audit(
            at_s=clock.now_s(),
            actor="cli",
            action="token.created",
            entity="token",
            entity_id=token_id,
            detail={"user_id": user_id, "role": parsed.value, "team_id": team_id},
        )
        uow.commit()
    return token, token_id


def revoke_token(engine: Engine, clock: Clock, token_id: str) -> None:
    """Revoke a token by id (processes that cached it stop accepting it within ``token_cache_s``)."""
    with UnitOfWork(engine, write=True) as uow:
        row = uow.session.get(ApiTokenRow, token_id)
        if row is None:
            raise NotFoundError("token", token_id)
        row.revoked = True
        uow.audit(
            at_s=clock.now_s(), actor="cli", action="token.revoked", entity="token", entity_id=token_id, detail={}
        )
        uow.commit()


class Authenticator:
    """Resolves bearer tokens to actors, with a short in-process cache (``cache_s``; 0 disables it)."""

    def __init__(self, engine: Engine, *, cache_s: float) -> None:
        self._engine = engine
        self._cache_s = cache_s
        self._cache: dict[str, tuple[float, Actor]] = {}
        self._lock = threading.Lock()

    def cached(self, token: str | None) -> Actor | None:
        """The actor for a token verified less than ``cache_s`` ago, without touching the database."""
        if not token or self._cache_s <= 0:
            return None
        with self._lock:
            hit = self._cache.get(hash_token(token))
        if hit is not None and time.monotonic() - hit[0] < self._cache_s:
            return hit[1]
        return None

    def actor_for(self, token: str | None) -> Actor:
        if not token:
            raise Unauthenticated("missing bearer token (send 'Authorization: Bearer <token>')")
        hit = self.cached(token)
        if hit is not None:
            return hit
        digest = hash_token(token)
        now = time.monotonic()
        with UnitOfWork(self._engine, write=False) as uow:
            row = uow.session.execute(
                select(ApiTokenRow.user_id, ApiTokenRow.role, ApiTokenRow.team_id, ApiTokenRow.revoked).where(
                    ApiTokenRow.token_hash == digest
                )
            ).first()
        if row is None or row.revoked:
            raise Unauthenticated("invalid or revoked token")
        actor = Actor(row.user_id, Role(row.role), row.team_id)
        if self._cache_s > 0:
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (now, actor)
        return actor
