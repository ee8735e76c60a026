"""botocore failures mapped onto the provider port's outcomes.

- an answer that says "no capacity / over a limit" -> :class:`ProviderRefused` (nothing was bought);
- no answer (read or connect timeout, a dropped connection) and throttling that outlived botocore's standard
  retries -> :class:`ProviderTimeout` (unknown outcome: look the order up by its token before retrying);
- any other error answer -> :class:`ProviderRefused` with the provider's code (a bad request stays a refusal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from gpufleet.adapters.providers import ProviderRefused, ProviderTimeout

T = TypeVar("T")

CAPACITY_CODES = frozenset(
    {"InsufficientInstanceCapacity", "InsufficientCapacity", "ReservationCapacityExceeded", "InsufficientHostCapacity"}
)
THROTTLE_CODES = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"})


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "Unknown"))


def call(what: str, fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Run ``fn(**kwargs)`` (one AWS call); raise the port's outcome on failure, never a raw botocore error."""
    try:
        return fn(**kwargs)
    except (ReadTimeoutError, ConnectTimeoutError, ConnectionClosedError, EndpointConnectionError) as exc:
        raise ProviderTimeout(f"{what}: no answer ({type(exc).__name__})") from None
    except ClientError as exc:
        code = error_code(exc)
        message = str(exc.response.get("Error", {}).get("Message", ""))
        if code in THROTTLE_CODES:
            raise ProviderTimeout(f"{what}: throttled after retries ({code})") from None
        raise ProviderRefused(code, f"{what}: {message}", retryable=code in CAPACITY_CODES) from None
