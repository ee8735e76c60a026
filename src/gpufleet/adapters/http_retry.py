"""One HTTP call to a cloud API, retried when no answer came or the answer was throttling or a server error.

Contract: ``send`` makes the request once; it is retried up to ``max_attempts`` attempts in all on a transport
error (no answer, a dropped connection) and on 429/5xx, waiting between attempts what the server's ``Retry-After``
asks (RFC 9110: delta-seconds, or an HTTP-date, a date already past being no wait), else an exponential backoff
with full jitter (``backoff_s`` doubling, at most 8 s). One call's attempts and waits together stay within
``deadline_s`` (:data:`CALL_DEADLINE_S`, 60 s): a retry whose wait would end past it is not made (never sooner
than the server asked), so a call ends within the deadline plus one attempt's timeouts. No answer after the last
attempt raises :class:`~gpufleet.adapters.providers.ProviderTimeout` (unknown outcome); otherwise the last response
is returned with the number of attempts, for the caller to read (a 429/5xx then means the retries ran out).
Retrying a mutation is safe only when the API makes it idempotent (a request id, or a name the resource is created
under).

``request_json`` reads one call's answer as the port's outcomes; ``json_object`` reads a successful answer (not a
JSON object: an unknown outcome); ``Pages`` guards a list's paging (a bounded number of pages, none twice, links on
the first request's origin only).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
CALL_DEADLINE_S = 60.0  # one call's attempts and the waits between them; an API request waits on it


def send_with_retries(
    send: Callable[[], httpx.Response],
    *,
    what: str,
    max_attempts: int,
    backoff_s: float,
    sleep: Callable[[float], None],
    deadline_s: float = CALL_DEADLINE_S,
) -> tuple[httpx.Response, int]:
    attempt = 0
    spent = 0.0  # the attempts' time (measured) and the waits' (as asked of ``sleep``)
    while True:
        attempt += 1
        t0 = time.monotonic()
        try:
            r = send()
        except httpx.TransportError as exc:
            spent += time.monotonic() - t0
            wait = _backoff(backoff_s, attempt)
            if attempt < max_attempts and spent + wait <= deadline_s:
                sleep(wait)
                spent += wait
                continue
            raise ProviderTimeout(f"{what}: no answer ({type(exc).__name__})") from None
        spent += time.monotonic() - t0
        if r.status_code in RETRY_STATUS and attempt < max_attempts:
            asked = _retry_after(r)
            wait = _backoff(backoff_s, attempt) if asked is None else asked
            if spent + wait <= deadline_s:
                sleep(wait)
                spent += wait
                continue
        return r, attempt


def request_json(
    send: Callable[[], httpx.Response],
    *,
    what: str,
    max_attempts: int,
    backoff_s: float,
    sleep: Callable[[float], None],
    error: Callable[[httpx.Response], tuple[str, str]],
    retryable: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """One call through :func:`send_with_retries`, read as the port's outcomes: a success's (2xx) JSON object; a
    redirect (3xx: a proxy's login page, a moved endpoint; never followed, a credential would go with it) or 429/5xx
    after the last attempt -> ``ProviderTimeout``; any other error -> ``ProviderRefused`` with the code ``error``
    reads from the answer (retryable when it is one of ``retryable``)."""
    r, attempts = send_with_retries(send, what=what, max_attempts=max_attempts, backoff_s=backoff_s, sleep=sleep)
    if r.is_success:
        return json_object(r, what)
    if r.status_code < 400:
        where = r.headers.get("Location", "")[:100]
        raise ProviderTimeout(f"{what}: {r.status_code} redirect to {where!r}, not followed (outcome unknown)")
    code, message = error(r)
    if r.status_code in RETRY_STATUS:
        raise ProviderTimeout(f"{what}: {r.status_code} {code} after {attempts} attempts: {message}")
    raise ProviderRefused(code, f"{what}: {message}", retryable=code in retryable)


def _backoff(backoff_s: float, attempt: int) -> float:
    return random.uniform(0, min(8.0, backoff_s * 2 ** (attempt - 1)))


_DELTA = re.compile(r"[0-9]{1,9}")


def _retry_after(r: httpx.Response, now: Callable[[], float] = time.time) -> float | None:
    """The seconds ``Retry-After`` asks to wait (RFC 9110 10.2.3: delta-seconds or an HTTP-date; a date already past:
    0); None when absent or neither form."""
    value = r.headers.get("Retry-After", "").strip()
    if _DELTA.fullmatch(value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT; a zone-less date is read as such
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now())


MAX_PAGES = 100


def json_object(r: httpx.Response, what: str) -> dict[str, Any]:
    """A successful answer's JSON object; an empty body is ``{}``; anything else (a proxy's HTML page, a truncated
    body, a JSON array) is an unknown outcome (``ProviderTimeout``: a write may have been done, so the caller looks the
    order up again rather than taking it for a refusal), never a decoder's exception."""
    if not r.content:
        return {}
    try:
        out = r.json()
    except ValueError:
        raise ProviderTimeout(
            f"{what}: {r.status_code} answer is not JSON (outcome unknown): {r.text[:100]!r}"
        ) from None
    if not isinstance(out, dict):
        raise ProviderTimeout(f"{what}: the answer is not a JSON object (outcome unknown): {str(out)[:100]}")
    return out


class Pages:
    """Guards a list's paging: at most :data:`MAX_PAGES` pages, no page link or token twice, and (for links) the
    same origin (scheme, host, port) as the first request, so a credential never follows a link elsewhere."""

    def __init__(self, what: str, origin: httpx.URL | None = None) -> None:
        self._what = what
        self._origin = origin
        self._seen: set[str] = set()

    def next(self, link_or_token: str) -> str:
        if link_or_token in self._seen or len(self._seen) + 1 >= MAX_PAGES:
            raise ProviderRefused("pagination_runaway", f"{self._what}: a page seen before, or over {MAX_PAGES} pages")
        self._seen.add(link_or_token)
        if self._origin is not None:
            url = httpx.URL(link_or_token)
            if (url.scheme, url.host, url.port) != (self._origin.scheme, self._origin.host, self._origin.port):
                raise ProviderRefused("bad_next_link", f"{self._what}: a next page elsewhere: {link_or_token[:100]}")
        return link_or_token
