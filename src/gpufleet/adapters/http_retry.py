"""One HTTP call to a cloud API, retried when no answer came or the answer was throttling or a server error.

Contract: ``send`` makes the request once; it is retried up to ``max_attempts`` attempts in all on a transport
error (no answer, a dropped connection) and on 429/5xx, waiting between attempts the server's ``Retry-After``
seconds when it gives some (at most 30), else an exponential backoff with full jitter (``backoff_s`` doubling,
at most 8 s). No answer after the last attempt raises :class:`~gpufleet.adapters.providers.ProviderTimeout`
(unknown outcome); otherwise the last response is returned with the number of attempts, for the caller to read
(a 429/5xx then means the retries ran out). Retrying a mutation is safe only when the API makes it idempotent
(a request id, or a name the resource is created under).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import httpx

from gpufleet.adapters.providers import ProviderTimeout

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0


def send_with_retries(
    send: Callable[[], httpx.Response],
    *,
    what: str,
    max_attempts: int,
    backoff_s: float,
    sleep: Callable[[float], None],
) -> tuple[httpx.Response, int]:
    attempt = 0
    while True:
        attempt += 1
        try:
            r = send()
        except httpx.TransportError as exc:
            if attempt < max_attempts:
                sleep(_backoff(backoff_s, attempt))
                continue
            raise ProviderTimeout(f"{what}: no answer ({type(exc).__name__})") from None
        if r.status_code in RETRY_STATUS and attempt < max_attempts:
            sleep(_retry_after(r) or _backoff(backoff_s, attempt))
            continue
        return r, attempt


def _backoff(backoff_s: float, attempt: int) -> float:
    return random.uniform(0, min(8.0, backoff_s * 2 ** (attempt - 1)))


def _retry_after(r: httpx.Response) -> float | None:
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(r.headers.get("Retry-After", ""))))
    except ValueError:
        return None
