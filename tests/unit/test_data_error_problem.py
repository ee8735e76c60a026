"""A value the database refuses for its column (sqlalchemy DataError) is a 422 problem+json, never a 500, and the
answer does not echo the SQL or the values."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI
from sqlalchemy import exc as sa_exc

from gpufleet.api.hardening import install


def test_a_data_error_is_a_422_problem_without_the_sql() -> None:
    app = FastAPI()
    install(app, max_body_bytes=1024, max_upload_bytes=1024)

    @app.get("/boom")
    def boom() -> None:
        raise sa_exc.DataError("INSERT INTO regions (geo) VALUES (%(geo)s)", {"geo": "secret"}, Exception("too long"))

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get("/boom")

    r = asyncio.run(get())
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["field"] == "body"
    assert "INSERT" not in r.text and "secret" not in r.text
