"""Bearer API tokens and roles.

Tokens are 256-bit random strings shown once at creation; only their SHA-256 is stored (a fast hash is
right for high-entropy secrets; no password stretching is needed). A token expires ``ttl`` after its creation
(default 90 days; ``never`` on request; tokens created before migration 0005 have no expiry). Roles:

- ``finops_admin``: spend -- reservations (create, approve), costs of every team, audit log.
- ``ml_platform_admin``: fleet -- registries, clusters, pools, reservations (create, approve), workloads.
- ``app_team``: its own team only -- creates and reads its workloads and their costs, asks for placement.
- ``viewer``: reads everything a viewer may see; writes nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets
import threading
import time
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Engine, select

from gpufleet.adapters.sql.models import ApiTokenRow, TeamRow
from gpufleet.domain.errors import GpufleetError, NotFoundError, PermissionDenied, ValidationError
from gpufleet.service.clock import Clock, IdGenerator, SystemClock
from gpufleet.service.uow import UnitOfWork

TOKEN_PREFIX = "gft_"
DEFAULT_TTL = "90d"
MAX_TTL_S = 10 * 366 * 86_400
# characters a name may not hold: control (Cc), format (Cf: zero-width spaces and joiners, bidi overrides, BOM),
# surrogates, line and paragraph separators; such a name prints as another name, or rewrites the terminal line
_UNSEEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def check_name(field: str, value: str) -> None:
    """ValidationError naming ``field`` when ``value`` holds a character that does not print as itself."""
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in _UNSEEN:
            raise ValidationError(
                field, f"must not contain control or invisible characters (U+{ord(ch):04X} at position {i})"
            )


_TTL_UNITS = {"m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_TTL_RE = re.compile(r"^([0-9]{1,6})([mhdw])$")


def parse_ttl(text: str) -> int | None:
    """``<n>m|h|d|w`` (e.g. ``30d``) -> seconds, or ``never`` -> None (no expiry). Anything else, zero, or more
    than ten years is a ValidationError naming ``ttl``."""
    t = text.strip().lower()
    if t == "never":
        return None
    m = _TTL_RE.match(t)
    if m is None:
        raise ValidationError("ttl", f"expected <n>m, <n>h, <n>d or <n>w (e.g. 30d) or 'never', got {text!r}")
    seconds = int(m.group(1)) * _TTL_UNITS[m.group(2)]
    if seconds <= 0 or seconds > MAX_TTL_S:
        raise ValidationError("ttl", f"must be between 1m and 10 years, got {text!r}")
    return seconds


def utc_iso(at_s: int) -> str:
    return dt.datetime.fromtimestamp(at_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Role(StrEnum):
    FINOPS_ADMIN = "finops_admin"
    ML_PLATFORM_ADMIN = "ml_platform_admin"
    APP_TEAM = "app_team"
    VIEWER = "viewer"


ADMINS = frozenset({Role.FINOPS_ADMIN, Role.ML_PLATFORM_ADMIN})
APPROVER_ROLES = ADMINS


class Unauthenticated(GpufleetError):
    """No token, or a token that is unknown, revoked or expired."""


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

    def require_owner(self, team_id: str, kind: str, ident: str) -> None:
        """A thing read or changed by its id: an app_team actor gets exactly the 404 of an id that does not exist
        for another team's (a 403 told it the id exists and which team owns it); every other role passes."""
        if self.role is Role.APP_TEAM and self.team_id != team_id:
            raise NotFoundError(kind, ident)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str
    token_id: str
    expires_at_s: int | None


def issue_token(
    engine: Engine,
    clock: Clock,
    ids: IdGenerator,
    *,
    role: str,
    user_id: str,
    team_id: str | None,
    ttl_s: int | None = 90 * 86_400,
) -> IssuedToken:
    """Create a token valid for ``ttl_s`` seconds (None: no expiry). app_team tokens must name a team."""
    try:
        parsed = Role(role)
    except ValueError:
        raise ValidationError("role", f"must be one of {', '.join(r.value for r in Role)}, got {role!r}") from None
    if parsed is Role.APP_TEAM and not team_id:
        raise ValidationError("team", "an app_team token must name its team (--team)")
    if not user_id or len(user_id) > 128:
        raise ValidationError("user", "must be 1..128 characters")
    check_name("user", user_id)
    if team_id is not None:
        check_name("team", team_id)
    if ttl_s is not None and not 0 < ttl_s <= MAX_TTL_S:
        raise ValidationError("ttl", "must be between 1 second and 10 years")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = ids.new("tok")
    now_s = clock.now_s()
    expires_at_s = None if ttl_s is None else now_s + ttl_s
    with UnitOfWork(engine, write=True) as uow:
        uow.session.add(
            ApiTokenRow(
                id=token_id,
                token_hash=hash_token(token),
                user_id=user_id,
                role=parsed.value,
                team_id=team_id,
                created_at_s=now_s,
                revoked=False,
                expires_at_s=expires_at_s,
            )
        )
        uow.audit(
            at_s=now_s,
            actor="cli",
            action="token.created",
            entity="token",
            entity_id=token_id,
            detail={"user_id": user_id, "role": parsed.value, "team_id": team_id, "expires_at_s": expires_at_s},
        )
        uow.commit()
    return IssuedToken(token, token_id, expires_at_s)


def team_exists(engine: Engine, team_id: str) -> bool:
    with UnitOfWork(engine, write=False) as uow:
        return uow.session.get(TeamRow, team_id) is not None


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown of a token: never the token or its hash."""

    token_id: str
    user_id: str
    role: str
    team_id: str | None
    created_at_s: int
    expires_at_s: int | None
    revoked: bool

    def status(self, now_s: int) -> str:
        if self.revoked:
            return "revoked"
        if self.expires_at_s is not None and self.expires_at_s <= now_s:
            return "expired"
        return "active"


def list_tokens(engine: Engine) -> list[TokenInfo]:
    """Every token, oldest first, without secrets (for rotation: find expired, expiring and unexpiring ones)."""
    with UnitOfWork(engine, write=False) as uow:
        rows = uow.session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.created_at_s, ApiTokenRow.id)).all()
        return [
            TokenInfo(r.id, r.user_id, r.role, r.team_id, r.created_at_s, r.expires_at_s, bool(r.revoked)) for r in rows
        ]


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
    """Resolves bearer tokens to actors, with a short in-process cache (``cache_s``; 0 disables it).

    Expiry is checked against ``clock`` on every request, cached or not: a cached token stops working at its
    ``expires_at_s`` exactly (revocation takes up to ``cache_s``)."""

    def __init__(self, engine: Engine, *, cache_s: float, clock: Clock | None = None) -> None:
        self._engine = engine
        self._cache_s = cache_s
        self._clock: Clock = clock or SystemClock()
        self._cache: dict[str, tuple[float, Actor, int | None]] = {}
        self._lock = threading.Lock()

    def cached(self, token: str | None) -> Actor | None:
        """The actor for a token verified less than ``cache_s`` ago, without touching the database."""
        if not token or self._cache_s <= 0:
            return None
        with self._lock:
            hit = self._cache.get(hash_token(token))
        if hit is not None and time.monotonic() - hit[0] < self._cache_s:
            if hit[2] is not None and self._clock.now_s() >= hit[2]:
                return None  # expired: actor_for reports it
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
                select(
                    ApiTokenRow.id,
                    ApiTokenRow.user_id,
                    ApiTokenRow.role,
                    ApiTokenRow.team_id,
                    ApiTokenRow.revoked,
                    ApiTokenRow.expires_at_s,
                    TeamRow.id.label("team_found"),
                )
                .outerjoin(TeamRow, TeamRow.id == ApiTokenRow.team_id)
                .where(ApiTokenRow.token_hash == digest)
            ).first()
        if row is None or row.revoked:
            raise Unauthenticated("invalid or revoked token")
        if row.expires_at_s is not None and self._clock.now_s() >= row.expires_at_s:
            raise Unauthenticated(
                f"token {row.id} expired at {utc_iso(row.expires_at_s)}; "
                "create a new one with `gpufleet token create --ttl ...`"
            )
        if row.team_id is not None and row.team_found is None:
            raise PermissionDenied(
                f"token {row.id} is for team {row.team_id!r}, which does not exist; an admin must create the team "
                "(POST /v1/teams) or issue a token for an existing one"
            )
        actor = Actor(row.user_id, Role(row.role), row.team_id)
        if self._cache_s > 0:
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (now, actor, row.expires_at_s)
        return actor
