"""API writes only at the store's schema revision.

``gpufleet serve`` keeps running while its store is moved to another schema revision (restored from an older
backup, upgraded by a newer release's ``gpufleet db upgrade``). The leader loop then stops acting and ``/readyz``
answers 503 (a load balancer takes the pod out after its probe's failure threshold), but a request that reaches the
process meanwhile, or a client that talks to it directly, would write with this code's model into a schema it was
not written for. :class:`WritesAtRevision` answers every write (POST, PUT, PATCH, DELETE) with 503 problem+json naming
both revisions, with ``Retry-After``, while the store is at another revision; reads are served (the columns this
code reads are there in the next and previous revisions, or the read fails on its own). It asks the services'
:class:`~gpufleet.adapters.sql.migrate.RevisionWatch` for a read at most ``REVISION_MAX_AGE_S`` old: one ``SELECT``
per interval whatever the request rate (the leader loop's own reads count), none on the event loop, and writes are
served again by themselves once the store is back at this code's revision."""

from __future__ import annotations

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from gpufleet.adapters.sql.migrate import RevisionWatch
from gpufleet.api.problems import problem

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REVISION_MAX_AGE_S = 2.0  # how old the revision read a write relies on may be (also: how soon writes resume)
RETRY_AFTER_S = 5


class WritesAtRevision:
    """ASGI middleware: a write while the store is at another schema revision is a 503 (see the module docstring)."""

    def __init__(self, app: ASGIApp, watch: RevisionWatch, max_age_s: float = REVISION_MAX_AGE_S) -> None:
        self.app = app
        self.watch = watch
        self.max_age_s = max_age_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in WRITE_METHODS:
            await self.app(scope, receive, send)
            return
        if self.watch.fresh(self.max_age_s):
            moved = self.watch.moved
        else:  # a database read: in a worker thread, never on the event loop
            moved = await run_in_threadpool(self.watch.recent, self.max_age_s)
        if moved is None:
            await self.app(scope, receive, send)
            return
        detail = (
            f"the store is at schema revision {moved}, this gpufleet serves revision {self.watch.need}: writes are "
            "refused until they match (reads are served); upgrade or roll back this release, or the store"
        )
        answer = problem(503, detail, request=Request(scope), headers={"Retry-After": str(RETRY_AFTER_S)})
        await answer(scope, receive, send)
