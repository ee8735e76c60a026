"""What an attack module gets: the server's address, tokens minted on demand, and the result type."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


@dataclass(frozen=True)
class Result:
    """One attack: ``held`` is True when the server refused or neutralised it as it should."""

    name: str
    held: bool
    detail: str = ""


@dataclass
class Ctx:
    base_url: str
    db_url: str
    _tokens: dict[tuple[str, str | None, str], str] = field(default_factory=dict)

    def token(self, role: str, team: str | None = None, user: str | None = None) -> str:
        """A bearer token for ``role`` (and ``team``), minted with the CLI as an operator would; cached."""
        key = (role, team, user or f"{role}-{team or 'all'}")
        if key not in self._tokens:
            args = [GPUFLEET, "token", "create", "--role", role, "--user", key[2], "--db", self.db_url]
            if team:
                args += ["--team", team]
            out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)
            self._tokens[key] = out.stdout.strip()
        return self._tokens[key]

    def client(self, role: str, team: str | None = None, user: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token(role, team, user)}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30.0)

    def anonymous(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=30.0)
