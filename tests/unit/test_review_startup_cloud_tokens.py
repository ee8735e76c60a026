"""Review (startup): the cloud adapters' credential requests against a token endpoint that hangs."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.adapters.gcp.session import GcpConfig, token_source


@pytest.fixture
def silent_token_endpoint() -> Iterator[str]:
    """A TCP server that accepts every connection and never answers (a token endpoint or proxy that hangs)."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(lst.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{lst.getsockname()[1]}/token"
    lst.close()
    for s in held:
        s.close()


def test_a_hung_token_endpoint_fails_the_call_instead_of_hanging_it_forever(
    silent_token_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: the ADC token refresh (google-auth over a urllib3 PoolManager built without a
    timeout) waited forever on a token endpoint that accepts and never answers, holding the token's lock: the
    leader's start-up pass and every later GCP call (reconcile, quota reads, price sync) hung for good, and each
    request that read GCP quotas kept a handler thread. Now the refresh is bounded by the provider's timeouts
    (connect and read, as the API calls) and fails as a retryable refusal."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from gpufleet.adapters.providers import ProviderRefused

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    sa = {"type": "service_account", "project_id": "p", "private_key_id": "k", "private_key": pem,
          "client_email": "gpufleet@p.iam.gserviceaccount.com", "client_id": "1", "token_uri": silent_token_endpoint}  # fmt: skip
    (tmp_path / "sa.json").write_text(json.dumps(sa))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "sa.json"))
    token = token_source(GcpConfig(project="p", credentials="adc", connect_timeout_s=1.0, read_timeout_s=1.0))
    out: dict[str, object] = {}

    def call() -> None:
        try:
            out["token"] = token()
        except Exception as exc:
            out["error"] = exc

    t0 = time.monotonic()
    th = threading.Thread(target=call, daemon=True)
    th.start()
    th.join(30)
    assert not th.is_alive(), "the token refresh still hangs after 30 s"
    assert time.monotonic() - t0 < 30
    assert isinstance(out.get("error"), ProviderRefused), out


def test_a_hung_azure_identity_endpoint_does_not_hold_the_start(
    silent_token_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (fixed), the defect: ``serve --provider azure`` fetches its first ARM token while building the
    services, before uvicorn listens; DefaultAzureCredential's requests had azure-core's default timeouts (300 s to
    connect, 300 s to read, with retries), so a managed-identity endpoint that accepts and never answers held the
    start far past the 60 s startup probe: a restart loop with the API never up (and a later refresh held every ARM
    call as long). Now the credential's requests carry the provider's connect and read timeouts."""
    from gpufleet.adapters.azure.session import DefaultToken
    from gpufleet.domain.errors import ValidationError

    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IDENTITY_ENDPOINT", silent_token_endpoint)  # a managed identity (App Service style)
    monkeypatch.setenv("IDENTITY_HEADER", "x")
    out: dict[str, object] = {}

    def fetch() -> None:
        try:
            out["token"] = DefaultToken(connect_timeout_s=1.0, read_timeout_s=1.0)
        except Exception as exc:
            out["error"] = exc

    th = threading.Thread(target=fetch, daemon=True)
    th.start()
    th.join(30)
    assert not th.is_alive(), "the token fetch still hangs after 30 s"
    assert isinstance(out.get("error"), ValidationError) and "azure_credentials" in str(out["error"]), out
