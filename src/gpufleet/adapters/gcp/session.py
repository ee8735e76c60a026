"""One client of a Google Cloud API (Compute Engine, Cloud Quotas, the Cloud Billing Catalog): credentials, timeouts,
retries with backoff, and GCP's errors mapped onto the provider port's outcomes.

Contract:
- credentials come only from Application Default Credentials (``google.auth.default``: the metadata server of
  GKE Workload Identity or a GCE VM, ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's user credentials), resolved when
  the client is built (none found: a :class:`ValidationError` naming ``gcp_credentials``); nothing here stores or
  logs them. A token that cannot be refreshed is a retryable refusal (nothing was sent). ``credentials="none"`` sends a
  placeholder token and is allowed only with an ``endpoint_url`` of our own (an emulator or the tests' fake), never
  against Google.
- a call that gets no answer (connect/read timeout, a dropped connection), or an answer of 429 or 5xx after
  ``max_attempts`` attempts (``Retry-After`` or exponential backoff with full jitter between them:
  :mod:`gpufleet.adapters.http_retry`), raises
  :class:`~gpufleet.adapters.providers.ProviderTimeout`: its outcome is unknown. Retrying a mutation is safe
  because every mutation carries a ``requestId`` (GCP runs a request id once).
- any other error answer raises :class:`~gpufleet.adapters.providers.ProviderRefused` with GCP's ``reason``
  (Compute Engine's ``alreadyExists``, ``invalid``, ``notFound``, ...; the newer APIs' ``status`` such as
  ``ALREADY_EXISTS``, ``ABORTED``, ``NOT_FOUND`` when the error names no reason); :meth:`GoogleApi.get` answers
  None for a resource that does not exist. A ``notFound`` whose message names not the resource asked for but one
  above it (``The resource 'projects/P' was not found``: ``gcp_project`` or a zone is wrong) is a retryable refusal
  (:data:`CONFIG_NOT_FOUND`) naming the setting, on every call: never read as a resource that does not exist.
- a permission or authentication error (:data:`PERMISSION_CODES`: 403 ``forbidden`` / ``PERMISSION_DENIED``, the API
  not enabled, 401, and a 401/403 whose body is not Google's error: a proxy's page) is a ``blocked`` refusal naming
  the settings to check (``gcp_credentials``' roles in ``gcp_project``; GCP's message names the permission): a
  configuration error an operator fixes, not a refusal of the order (the reservation is held ``blocked`` and tried
  on each pass).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from gpufleet.adapters.http_retry import request_json
from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout
from gpufleet.domain.errors import ValidationError

COMPUTE_URL = "https://compute.googleapis.com/compute/v1/"
QUOTAS_URL = "https://cloudquotas.googleapis.com/v1/"
BILLING_URL = "https://cloudbilling.googleapis.com/v1/"
NOT_FOUND = frozenset({"notFound", "NOT_FOUND"})
# a notFound naming what the settings point at (the project, a zone), not the resource asked for: a configuration
# error, a refusal about the moment, never "the resource is gone"
CONFIG_NOT_FOUND = frozenset({"project_not_found", "parent_not_found"})
# not allowed / not authenticated / the API not enabled: the settings (IAM roles, credentials, project) are wrong, not
# the order; a refusal that holds an approved order (blocked), never cancels it. http401/http403: a 401/403 whose body
# is not Google's error (a proxy's page in front of the API)
PERMISSION_CODES = frozenset(
    {"forbidden", "PERMISSION_DENIED", "insufficientPermissions", "IAM_PERMISSION_DENIED", "accessNotConfigured",
     "SERVICE_DISABLED", "authError", "UNAUTHENTICATED", "http401", "http403"}
)  # fmt: skip
_PERMISSION = re.compile(r"'([a-z][A-Za-z]*\.[A-Za-z.]{1,150})' permission")
_NAMED = re.compile(r"'(projects/[^'\s]+)'")
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


@dataclass(frozen=True, slots=True)
class GcpConfig:
    """Where and how to call Compute Engine.

    ``project``: the project that holds the reservations. ``regions``: the regions the fleet uses (a reservation is
    looked up in each region's zone). ``zones``: the zone per region where reservations are placed (default
    ``<region>-a``). ``endpoint_url``: another Compute API root (an emulator); None = Google.
    ``quotas_endpoint_url``: another Cloud Quotas API root (an emulator); None = Google.
    ``billing_endpoint_url``: another Cloud Billing API root (an emulator of its public catalog); None = Google.
    ``max_attempts``: attempts per call on no answer, 429 or 5xx (1 = no retry).
    """

    project: str
    regions: tuple[str, ...] = ("us-central1",)
    zones: Mapping[str, str] = field(default_factory=dict)
    endpoint_url: str | None = None
    quotas_endpoint_url: str | None = None
    billing_endpoint_url: str | None = None
    credentials: str = "adc"  # "adc" | "none" (only with endpoint_url)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    max_attempts: int = 3
    backoff_s: float = 0.5  # first backoff; doubles each attempt, capped at 8 s, full jitter

    def __post_init__(self) -> None:
        if not self.project:
            raise ValidationError("gcp_project", "name the project that holds the reservations")
        if not self.regions:
            raise ValidationError("gcp_regions", "name at least one region")
        if not 1 <= self.max_attempts <= 10:
            raise ValidationError("gcp_max_attempts", f"must be in 1..10, got {self.max_attempts}")
        if self.credentials not in ("adc", "none"):
            raise ValidationError("gcp_credentials", f"must be 'adc' or 'none', got {self.credentials!r}")
        if self.credentials == "none" and not self.endpoint_url:
            raise ValidationError("gcp_credentials", "'none' only with gcp_endpoint_url (an emulator), never Google")

    def zone(self, region: str) -> str:
        return self.zones.get(region, f"{region}-a")


class AdcToken:
    """An access token from Application Default Credentials, refreshed when it is about to expire."""

    def __init__(self, *, connect_timeout_s: float = 5.0, read_timeout_s: float = 10.0) -> None:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.urllib3
        import urllib3

        try:
            self._creds, _ = google.auth.default(scopes=[SCOPE])
        except google.auth.exceptions.GoogleAuthError as exc:
            raise ValidationError("gcp_credentials", f"no Application Default Credentials here: {exc}") from None
        self._errors = google.auth.exceptions.GoogleAuthError
        # user credentials (gcloud's ADC) name the project Google bills an API's quota to; APIs such as Cloud Quotas
        # refuse user credentials without it (``gcloud auth application-default set-quota-project``)
        self.quota_project_id: str | None = getattr(self._creds, "quota_project_id", None)
        # bounded like the API calls: google-auth sends the token request with no timeout of its own, so a token
        # endpoint that accepts and never answers would hold the lock below, and every GCP call, forever
        timeout = urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)
        self._request = google.auth.transport.urllib3.Request(urllib3.PoolManager(timeout=timeout))  # type: ignore[no-untyped-call]
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if not self._creds.valid:
                try:
                    self._creds.refresh(self._request)  # type: ignore[no-untyped-call]
                except self._errors as exc:  # nothing was sent: the order is tried again later, not cancelled
                    raise ProviderRefused("credentials_unavailable", f"token refresh: {exc}", retryable=True) from None
            return str(self._creds.token)


def token_source(config: GcpConfig) -> Callable[[], str]:
    """The bearer token of every call: ADC, resolved now (a server without them stops at start naming the
    setting), or the emulator placeholder."""
    if config.credentials == "none":
        return lambda: "emulator"
    return AdcToken(connect_timeout_s=config.connect_timeout_s, read_timeout_s=config.read_timeout_s)


class GoogleApi:
    """JSON over HTTPS to one Google Cloud API of one project (paths under ``projects/{project}/``); thread-safe.
    ``root``: the API's root (default Compute Engine, or the config's emulator endpoint)."""

    def __init__(
        self,
        config: GcpConfig,
        *,
        root: str | None = None,
        token: Callable[[], str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._token = token or token_source(config)
        self._sleep = sleep
        base = (root or config.endpoint_url or COMPUTE_URL).rstrip("/") + "/"
        timeout = httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s)
        self._http = httpx.Client(base_url=base, timeout=timeout)

    def headers(self) -> dict[str, str]:
        """A call's credentials: the bearer token, and the quota project of user credentials when they name one."""
        out = {"Authorization": f"Bearer {self._token()}"}
        project = getattr(self._token, "quota_project_id", None)
        if project:
            out["x-goog-user-project"] = str(project)
        return out

    def get(self, what: str, path: str) -> dict[str, Any] | None:
        """GET a resource; None when GCP answers ``notFound``; an empty answer (no resource is empty) is none at all
        (``ProviderTimeout``), never a resource without fields."""
        try:
            got = self.call(what, "GET", path)
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
        in_project: bool = True,
    ) -> dict[str, Any]:
        """One call, retried on no answer, 429 and 5xx; raises the port's outcome on failure, never httpx's.
        ``in_project``: ``path`` is under ``projects/{project}/`` (False: under the API's root, as the Cloud Billing
        Catalog's public ``services/{service}/skus``)."""
        full = f"projects/{self.config.project}/{path}" if in_project else path

        def send() -> httpx.Response:
            headers = self.headers()
            return self._http.request(method, full, params=params, json=body, headers=headers)

        c = self.config
        try:
            return request_json(
                send, what=what, max_attempts=c.max_attempts, backoff_s=c.backoff_s, sleep=self._sleep, error=_error
            )
        except ProviderRefused as exc:
            if exc.code in PERMISSION_CODES:
                said = exc.message.removeprefix(f"{what}: ")
                named = _PERMISSION.search(said)  # GCP names the permission missing: first, before its message
                denied = f"permission denied: {named.group(1)}" if named else "permission denied"
                where = f"the IAM roles of gcp_credentials in gcp_project {c.project!r}"
                raise ProviderRefused(exc.code, f"{what}: {denied} (check {where}): {said}", blocked=True) from None
            if exc.code not in NOT_FOUND or not in_project:
                raise
            asked = full.rstrip("/")
            named = _NAMED.search(exc.message)
            if named is None or not asked.startswith(named.group(1).rstrip("/") + "/"):
                raise  # the resource asked for (or one not named): it does not exist
            above = named.group(1).rstrip("/")
            code = "project_not_found" if above == f"projects/{c.project}" else "parent_not_found"
            said = exc.message.removeprefix(f"{what}: ")  # the error reader already names the call
            msg = f"{what}: {above} does not exist (check gcp_project {c.project!r} and gcp_zones): {said}"
            raise ProviderRefused(code, msg, retryable=True) from None


def _error(r: httpx.Response) -> tuple[str, str]:
    """GCP's error answer: ``{"error": {"code", "message", "status", "errors": [{"reason", "message"}]}}``
    (Compute Engine's carries ``errors``; the newer APIs' only ``status``). Any other body (a proxy's page, an
    ``error`` that is a string) is ``http<status>`` with the body's start as the message."""
    try:
        err = r.json().get("error")
    except (ValueError, AttributeError):
        err = None
    if not isinstance(err, dict):
        return f"http{r.status_code}", r.text[:200]
    errors = err.get("errors")
    first = errors[0] if isinstance(errors, list) and errors else None
    reason = first.get("reason") if isinstance(first, dict) else None
    return str(reason or err.get("status") or f"http{r.status_code}"), str(err.get("message") or "")
