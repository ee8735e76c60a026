"""The cloud adapters' one retry loop: no answer and 429/5xx are retried, the server's Retry-After is honoured (a wait
past the call's deadline ends the call instead: never retried sooner than asked), a refusal is returned at once, and
no answer after the last attempt is an unknown outcome."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from gpufleet.adapters.http_retry import send_with_retries
from gpufleet.adapters.providers import ProviderTimeout


def _answers(*items: int | str | Exception) -> tuple[list[float], Callable[[], httpx.Response]]:
    slept: list[float] = []
    queue = list(items)

    def send() -> httpx.Response:
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        status, _, after = str(item).partition("/")
        return httpx.Response(int(status), headers={"Retry-After": after} if after else {})

    return slept, send


def test_throttling_is_retried_after_the_servers_wait_and_a_refusal_is_returned_at_once() -> None:
    slept, send = _answers("429/2", "503/7", 200)
    r, attempts = send_with_retries(send, what="x", max_attempts=3, backoff_s=0.5, sleep=slept.append)
    assert (r.status_code, attempts) == (200, 3) and slept == [2.0, 7.0]
    slept, send = _answers("429/2", "503/7200", 200)  # two hours: past the call's deadline, the 503 is the answer
    r, attempts = send_with_retries(send, what="x", max_attempts=3, backoff_s=0.5, sleep=slept.append)
    assert (r.status_code, attempts) == (503, 2) and slept == [2.0]
    slept, send = _answers(400, 200)
    r, attempts = send_with_retries(send, what="x", max_attempts=3, backoff_s=0.5, sleep=slept.append)
    assert (r.status_code, attempts, slept) == (400, 1, [])


def test_no_answer_is_retried_with_backoff_then_an_unknown_outcome() -> None:
    slept, send = _answers(httpx.ReadTimeout("t"), 500, httpx.ConnectError("c"))
    with pytest.raises(ProviderTimeout, match="no answer"):
        send_with_retries(send, what="x", max_attempts=3, backoff_s=0.5, sleep=slept.append)
    assert len(slept) == 2 and 0 <= slept[0] <= 0.5 and 0 <= slept[1] <= 1.0
    slept, send = _answers(503, 503)  # the retries ran out: the last answer, for the caller to read
    r, attempts = send_with_retries(send, what="x", max_attempts=2, backoff_s=0.5, sleep=slept.append)
    assert (r.status_code, attempts) == (503, 2)


def test_pages_stop_on_a_repeat_and_stay_on_the_first_origin() -> None:
    from gpufleet.adapters.http_retry import Pages
    from gpufleet.adapters.providers import ProviderRefused

    pages = Pages("list", httpx.URL("https://prices.azure.com/api/retail/prices"))
    assert pages.next("https://prices.azure.com:443/api/retail/prices?$skip=100")  # the default port is the origin's
    for link, code in (
        ("https://prices.azure.com:443/api/retail/prices?$skip=100", "pagination_runaway"),  # the same page again
        ("http://prices.azure.com/api/retail/prices?$skip=200", "bad_next_link"),  # not https
        ("https://prices.azure.com:8443/api/retail/prices?$skip=200", "bad_next_link"),  # another port
    ):
        with pytest.raises(ProviderRefused) as refused:
            pages.next(link)
        assert refused.value.code == code
