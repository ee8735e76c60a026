"""One Azure Resource Manager client (Microsoft.Compute in one subscription and resource group): credentials,
timeouts, retries, and ARM's errors mapped onto the provider port's outcomes.

Contract:
- credentials come only from azure-identity's ``DefaultAzureCredential`` (AKS workload identity, a managed identity,
  the environment's service principal, the Azure CLI's login), resolved when the client is built and asked for a
  token there, so a server without them stops at start naming ``azure_credentials``; nothing here stores or logs
  them. A token that cannot be refreshed later is a retryable refusal (nothing was sent). ``credentials="none"``
  sends a placeholder token and is allowed only with an ``endpoint_url`` of our own (an emulator, the tests' fake).
- every call carries ``api-version`` :data:`API_VERSION` (the version of azure-mgmt-compute's models the tests
  validate against: the first with future capacity reservations).
- no answer, or 429/5xx after ``max_attempts`` attempts (``Retry-After`` or backoff between them), raises
  :class:`~gpufleet.adapters.providers.ProviderTimeout` (unknown outcome; ARM's PUT is idempotent by name, so a
  retry is safe); any other error answer raises :class:`~gpufleet.adapters.providers.ProviderRefused` with ARM's
  ``error.code``, retryable for the capacity codes (:data:`CAPACITY_CODES`); :meth:`ArmApi.get` answers None for a
  resource that does not exist. A resource group or subscription that does not exist (:data:`CONFIG_NOT_FOUND`:
  ``azure_resource_group`` or ``azure_subscription_id`` is wrong) is a retryable refusal naming the setting, on
  every call: never read as a resource that does not exist. A permission or authentication error
  (:data:`PERMISSION_CODES`: ``AuthorizationFailed``, ``LinkedAuthorizationFailed``, a token ARM does not take) is a
  retryable refusal naming the settings to check (``azure_credentials``' role assignments; ARM's message names the
  action; a 401/403 whose body is not ARM's error, a proxy's page) and a denial by Azure Policy (:data:`POLICY_CODES`:
``RequestDisallowedByPolicy``) are ``blocked`` refusals naming the settings to check: a configuration error an
operator fixes, not a refusal of the order (the reservation is held ``blocked`` and tried on each pass).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from gpufleet.adapters.http_retry import Pages, request_json
from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout
from gpufleet.domain.errors import ValidationError

ARM_URL = "https://management.azure.com/"
SCOPE = "https://management.azure.com/.default"
API_VERSION = "2026-04-01"
NOT_FOUND = frozenset({"ResourceNotFound", "NotFound", "ParentResourceNotFound"})
# what the settings name does not exist: a configuration error (every call under it fails alike), never "the
# reservation is gone"; a refusal about the moment, so nothing is cancelled or ended while the setting is wrong
CONFIG_NOT_FOUND = frozenset({"ResourceGroupNotFound", "SubscriptionNotFound"})
# not allowed / not authenticated: the settings (role assignments, credentials, tenant) are wrong, not the order; a
# refusal that holds an approved order (blocked), never cancels it. http401/http403: a 401/403 whose body is not ARM's
# error (a proxy's page in front of management.azure.com)
PERMISSION_CODES = frozenset(
    {"AuthorizationFailed", "LinkedAuthorizationFailed", "InvalidAuthenticationToken",
     "InvalidAuthenticationTokenTenant", "ExpiredAuthenticationToken", "AuthenticationFailed", "http401", "http403"}
)  # fmt: skip
# an Azure Policy assignment denies the request: a rule of the organisation's on gpufleet's side (an operator changes the
# assignment or grants an exemption), not a refusal of the order; held blocked like a permission
POLICY_CODES = frozenset({"RequestDisallowedByPolicy"})
_ACTION = re.compile(r"perform action '([^']{1,200})'")
# Azure's answers when it has no hardware for the size now (a refusal about the moment, not the order)
CAPACITY_CODES = frozenset(
    {"AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest",
     "OverconstrainedZonalAllocationRequest", "SkuNotAvailable"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class AzureConfig:
    """Where and how to call ARM. ``regions``: Azure locations the fleet uses (``eastus``, ...); ``zones``: the
    availability zone per region a reservation is placed in (``"1"``; none: a regional reservation)."""

    subscription_id: str
    resource_group: str
    regions: tuple[str, ...] = ("eastus",)
    zones: Mapping[str, str] = field(default_factory=dict)
    endpoint_url: str | None = None
    credentials: str = "default"  # "default" | "none" (only with endpoint_url)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    max_attempts: int = 3
    backoff_s: float = 0.5

    def __post_init__(self) -> None:
        if not self.subscription_id:
            raise ValidationError("azure_subscription_id", "name the subscription that holds the reservations")
        if not self.resource_group:
            raise ValidationError("azure_resource_group", "name the resource group that holds the reservations")
        if not self.regions:
            raise ValidationError("azure_regions", "name at least one region")
        if not 1 <= self.max_attempts <= 10:
            raise ValidationError("azure_max_attempts", f"must be in 1..10, got {self.max_attempts}")
        if self.credentials not in ("default", "none"):
            raise ValidationError("azure_credentials", f"must be 'default' or 'none', got {self.credentials!r}")
        if self.credentials == "none" and not self.endpoint_url:
            raise ValidationError("azure_credentials", "'none' only with azure_endpoint_url (an emulator), never Azure")


class DefaultToken:
    """A bearer token for ARM from ``DefaultAzureCredential``, refreshed five minutes before it expires."""

    def __init__(self, *, connect_timeout_s: float = 5.0, read_timeout_s: float = 10.0) -> None:
        from azure.core.exceptions import ClientAuthenticationError
        from azure.identity import CredentialUnavailableError, DefaultAzureCredential

        self._errors = (ClientAuthenticationError, CredentialUnavailableError)
        # bounded like the ARM calls (azure-core's own defaults are 300 s each): the first token is fetched while the
        # server starts, before it listens, so an identity endpoint that hangs must not outlast the startup probe
        self._cred = DefaultAzureCredential(connection_timeout=connect_timeout_s, read_timeout=read_timeout_s)
        self._lock = threading.Lock()
        quiet = logging.getLogger("azure.identity")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # the chain's own report of each failed try: the error below says it
        try:
            self._token = self._cred.get_token(SCOPE)
        except self._errors as exc:
            tried = re.findall(r"^\s+(\w+Credential):", str(exc), flags=re.M)
            raise ValidationError(
                "azure_credentials",
                f"no Azure credentials here (DefaultAzureCredential tried {', '.join(tried) or 'its chain'})",
            ) from None
        finally:
            quiet.setLevel(level)

    def __call__(self) -> str:
        with self._lock:
            if self._token.expires_on - 300 < time.time():
                try:
                    self._token = self._cred.get_token(SCOPE)
                except self._errors as exc:  # nothing was sent: the order is tried again later, not cancelled
                    raise ProviderRefused("credentials_unavailable", f"token: {exc}", retryable=True) from None
            return str(self._token.token)


class ArmApi:
    """JSON over HTTPS to Microsoft.Compute in one resource group (paths under ``.../providers/Microsoft.Compute/``);
    thread-safe."""

    def __init__(
        self,
        config: AzureConfig,
        *,
        token: Callable[[], str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._token = token or (
            (lambda: "emulator")
            if config.credentials == "none"
            else DefaultToken(connect_timeout_s=config.connect_timeout_s, read_timeout_s=config.read_timeout_s)
        )
        self._sleep = sleep
        base = (config.endpoint_url or ARM_URL).rstrip("/") + "/"
        self._prefix = (
            f"subscriptions/{config.subscription_id}/resourceGroups/{config.resource_group}"
            "/providers/Microsoft.Compute/"
        )
        self._sub_prefix = f"subscriptions/{config.subscription_id}/providers/Microsoft.Compute/"
        timeout = httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s)
        self._http = httpx.Client(base_url=base, timeout=timeout)

    def get(self, what: str, path: str, *, params: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """GET a resource; None when ARM says it does not exist; an empty answer (no resource is empty) is none at all
        (``ProviderTimeout``), never a resource without fields."""
        try:
            got = self.call(what, "GET", path, params=params)
        except ProviderRefused as exc:
            if exc.code in NOT_FOUND:
                return None
            raise
        if not got:
            raise ProviderTimeout(f"{what}: an empty answer to a read (outcome unknown)")
        return got

    def call(
        self,
        what: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        scope: str = "group",
    ) -> dict[str, Any]:
        """One call under the resource group's Microsoft.Compute (``scope="subscription"``: the subscription's),
        retried on no answer, 429 and 5xx; raises the port's outcome on failure, never httpx's."""
        prefix = self._prefix if scope == "group" else self._sub_prefix
        return self._send(what, method, prefix + path, {"api-version": API_VERSION, **(params or {})}, body)

    def pages(self, what: str, path: str, *, scope: str = "group") -> list[dict[str, Any]]:
        """Every item of a list, following ARM's ``nextLink`` (which carries its own query) on ARM's own origin."""
        page = self.call(what, "GET", path, scope=scope)
        items = list(page.get("value") or [])
        guard = Pages(what, self._http.base_url)
        while page.get("nextLink"):
            page = self._send(what, "GET", guard.next(str(page["nextLink"])), None, None)
            items += page.get("value") or []
        return items

    def _send(self, what: str, method: str, url: str, query: Mapping[str, str] | None, body: Any) -> dict[str, Any]:
        def send() -> httpx.Response:
            headers = {"Authorization": f"Bearer {self._token()}"}
            return self._http.request(method, url, params=query, json=body, headers=headers)

        c = self.config
        try:
            return request_json(
                send,
                what=what,
                max_attempts=c.max_attempts,
                backoff_s=c.backoff_s,
                sleep=self._sleep,
                error=_error,
                retryable=CAPACITY_CODES,
            )
        except ProviderRefused as exc:
            if exc.code in PERMISSION_CODES:
                said = exc.message.removeprefix(f"{what}: ")
                actions = _ACTION.findall(said)  # the action denied (Linked...: the last named), before ARM's message
                denied = f"permission denied for {actions[-1]}" if actions else "permission denied"
                where = f"the roles of azure_credentials on azure_resource_group {c.resource_group!r}"
                raise ProviderRefused(exc.code, f"{what}: {denied} (check {where}): {said}", blocked=True) from None
            if exc.code in POLICY_CODES:
                said = exc.message.removeprefix(f"{what}: ")
                where = f"the Azure Policy assignments on azure_resource_group {c.resource_group!r}"
                msg = f"{what}: denied by policy (check {where}): {said}"
                raise ProviderRefused(exc.code, msg, blocked=True) from None
            if exc.code not in CONFIG_NOT_FOUND:
                raise
            where = f"azure_resource_group {c.resource_group!r} or azure_subscription_id {c.subscription_id!r}"
            said = exc.message.removeprefix(f"{what}: ")  # the error reader already names the call
            raise ProviderRefused(exc.code, f"{what}: {said} (check {where})", retryable=True) from None


def _error(r: httpx.Response) -> tuple[str, str]:
    """ARM's error answer: ``{"error": {"code", "message", "details": [...]}}``; any other body (a proxy's page, an
    ``error`` that is a string) is ``http<status>`` with the body's start as the message."""
    try:
        err = r.json().get("error")
    except (ValueError, AttributeError):
        err = None
    if not isinstance(err, dict):
        return f"http{r.status_code}", r.text[:200]
    return str(err.get("code") or f"http{r.status_code}"), str(err.get("message") or "")[:500]
