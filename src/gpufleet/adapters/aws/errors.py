"""botocore failures mapped onto the provider port's outcomes.

- an answer that says "no capacity / over a limit" -> :class:`ProviderRefused` (nothing was bought);
- no answer (read or connect timeout, a dropped connection), throttling and server errors (an HTTP 5xx answer:
  ``InternalError``, ``Unavailable``, ...) that outlived botocore's standard retries -> :class:`ProviderTimeout`
  (unknown outcome: the order may exist; look it up by its token before retrying);
- a permission or authentication error (:data:`PERMISSION_CODES`: the IAM policy lacks the action, the credentials
  are not valid, the account is blocked) -> a ``blocked`` :class:`ProviderRefused` naming the IAM action to allow: a
  configuration error an operator fixes, not a refusal of the order (the reservation is held ``blocked`` and tried on
  each pass);
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
SERVER_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})
THROTTLE_CODES = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"})
# not allowed / not authenticated: the settings (IAM policy, credentials, account) are wrong, not the order; a refusal
# about the moment, so an approved order is never cancelled for it
PERMISSION_CODES = frozenset(
    {"UnauthorizedOperation", "AuthFailure", "Blocked", "AccessDenied", "AccessDeniedException", "OptInRequired",
     "InvalidClientTokenId", "UnrecognizedClientException", "ExpiredToken", "RequestExpired", "SignatureDoesNotMatch"}
)  # fmt: skip


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
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in THROTTLE_CODES:
            raise ProviderTimeout(f"{what}: throttled after retries ({code})") from None
        if code not in CAPACITY_CODES and (status >= 500 or code in SERVER_CODES):  # EC2 answers no capacity as 500
            raise ProviderTimeout(f"{what}: server error after retries ({code}): the outcome is unknown") from None
        if code in PERMISSION_CODES:
            action = f"{_iam_prefix(fn)}:{what}"
            hint = f"permission denied (allow {action} to gpufleet's AWS identity, or check its credentials)"
            raise ProviderRefused(code, f"{what}: {hint}: {message}", blocked=True) from None
        raise ProviderRefused(code, f"{what}: {message}", retryable=code in CAPACITY_CODES) from None


def _iam_prefix(fn: Callable[..., object]) -> str:
    """The IAM action prefix of a boto3 client's method (``ec2``, ``servicequotas``, ``pricing``; else ``ec2``)."""
    model = getattr(getattr(getattr(fn, "__self__", None), "meta", None), "service_model", None)
    return str(getattr(model, "signing_name", None) or "ec2")
