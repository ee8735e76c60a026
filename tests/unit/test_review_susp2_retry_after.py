"""Review (susp2): the cloud APIs' retries (adapters/http_retry.py) and the server's ``Retry-After`` (RFC 9110 10.2.3:
delta-seconds or an HTTP-date), and the bound on one API call's total wait."""

from __future__ import annotations

import time
from email.utils import formatdate

import httpx

from gpufleet.adapters.http_retry import send_with_retries


class Throttled:
    """An API that answers 429 with the given Retry-After ``times`` times, then 200; counts the calls."""

    def __init__(self, retry_after: str, times: int) -> None:
        self.retry_after = retry_after
        self.times = times
        self.calls = 0

    def __call__(self) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.times:
            return httpx.Response(429, headers={"Retry-After": self.retry_after}, json={"error": "slow down"})
        return httpx.Response(200, json={})


def test_retry_after_as_an_http_date_is_honoured() -> None:
    """Review (fixed), the defect: ``_retry_after`` reads only ``float(...)``; an HTTP-date (``Retry-After: Wed, 21 Oct
    2026 07:28:00 GMT``, which RFC 9110 allows and proxies and some APIs send) is ignored, and the retry comes after the
    jittered backoff (here at most 0.5 s) instead of when the server asked: one more throttled call, the quota burned.
    Now the date is waited for."""
    api = Throttled(formatdate(time.time() + 20, usegmt=True), times=1)
    waits: list[float] = []
    r, attempts = send_with_retries(api, what="t", max_attempts=3, backoff_s=0.5, sleep=waits.append)
    assert r.status_code == 200 and attempts == 2
    assert len(waits) == 1 and 17.0 <= waits[0] <= 21.0, waits
    past: list[float] = []  # a date already past: retry at once
    api = Throttled(formatdate(time.time() - 60, usegmt=True), times=1)
    assert send_with_retries(api, what="t", max_attempts=3, backoff_s=0.5, sleep=past.append)[1] == 2
    assert past == [0.0]


def test_one_calls_total_wait_is_bounded_by_its_deadline() -> None:
    """Review (fixed), the defect: each wait is capped at 30 s but nothing bounds their sum: with ``max_attempts`` 10
    (the settings allow it) and an API asking ``Retry-After: 30`` every time, one call sleeps 270 s, holding the API
    request that made it (an approval submits at once). Expected: the call gives up once the next wait would pass its
    documented deadline (``CALL_DEADLINE_S``, 60 s); the caller sees the last answer (429: the retries ran out).
    Now so."""
    api = Throttled("30", times=100)
    waits: list[float] = []
    r, attempts = send_with_retries(api, what="t", max_attempts=10, backoff_s=0.5, sleep=waits.append)
    assert r.status_code == 429
    assert sum(waits) <= 60.0, waits  # http_retry.CALL_DEADLINE_S
    assert attempts == api.calls < 10


def test_a_retry_after_beyond_the_deadline_is_not_retried_early() -> None:
    """Review (fixed), the defect: ``Retry-After: 3600`` (come back in an hour) is cut to 30 s and the call retried
    then, against what the server asked. Expected: no retry sooner than asked; the call ends with the 429 (the
    reconciler's next pass tries again). Now so."""
    api = Throttled("3600", times=100)
    waits: list[float] = []
    r, attempts = send_with_retries(api, what="t", max_attempts=3, backoff_s=0.5, sleep=waits.append)
    assert (r.status_code, attempts, waits) == (429, 1, [])


def test_delta_seconds_and_garbage() -> None:
    """Delta-seconds are waited as given; a value that is neither form falls back to the backoff (at most
    ``backoff_s`` on the first retry)."""
    for header, low, high in (("2", 2.0, 2.0), ("soon", 0.0, 0.5), ("-5", 0.0, 0.5)):
        waits: list[float] = []
        r, attempts = send_with_retries(
            Throttled(header, 1), what="t", max_attempts=3, backoff_s=0.5, sleep=waits.append
        )
        assert (r.status_code, attempts) == (200, 2)
        assert low <= waits[0] <= high, (header, waits)
