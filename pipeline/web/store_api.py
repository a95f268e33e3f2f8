"""The store over HTTP (`GET /api/store/<query>`: tracks, events, counts, segments,
activity), with the token as for the rest of the API. Parameters are checked by
`store.filters` (and a camera, class, zone or line must be one the store holds or the run
names: `WebServer.known`, the lines and zones as the last reload left them): a bad one is 400
with `{"error": "<one line naming it>"}`; a store that cannot be read is 503 with its
line; a run without a store (`outputs.store: false`) answers 404.

A query past the store's limits for one (rows, time: `store.queries`) is a 400 naming the
limit. `AT_ONCE` queries are answered together; more wait up to `WAIT_S` for one to end,
then are a 503: however many clients ask, the store's readers hold at most `AT_ONCE`
answers in memory and `AT_ONCE` cores, and the cameras keep the rest. A query waits on the
server's loop (`Places`), not in its thread pool: waiting ones hold no thread the page's other
answers need.
"""
from __future__ import annotations

import asyncio
import logging

from pipeline.redact import redact, redact_data
from pipeline.store.filters import ACCEPTED, BadParameter, parse
from pipeline.store.queries import body
from pipeline.store.tables import StoreError
from pipeline.web.request import Ask, Reply, as_json

log = logging.getLogger("pipeline.web")

PREFIX = "/api/store/"
AT_ONCE = 2
WAIT_S = 10.0  # at most a query's time limit: a waiting request gets the place of one that ran out


class Places:
    """The `AT_ONCE` places of one server's store queries, taken on its loop."""

    def __init__(self) -> None:
        self._free = asyncio.Semaphore(AT_ONCE)

    async def take(self) -> bool:
        """A place within `WAIT_S` (False: none came free; give it back with `give`)."""
        try:
            await asyncio.wait_for(self._free.acquire(), WAIT_S)
        except asyncio.TimeoutError:
            return False
        return True

    def give(self) -> None:
        self._free.release()


def busy() -> Reply:
    return _error(503, f"the store is answering {AT_ONCE} queries already, its limit at once: "
                       "try again in a few seconds", {"Retry-After": "5"})


def _error(status: int, line: str, headers: dict[str, str] | None = None) -> Reply:
    return as_json({"error": redact(line)}, status, headers)


def serve(ask: Ask) -> Reply:
    """`GET /api/store/<kind>?...` (`ask.path`: the kind), run in a place of `Places`."""
    kind, store = ask.path, ask.app.store
    if kind not in ACCEPTED:
        return _error(404, f"no such query: /api/store/{{{','.join(ACCEPTED)}}}")
    if store is None:
        return _error(404, "this run keeps no store (outputs.store is off)")
    try:
        filters = parse(kind, ask.query)
        store.check_known(filters, ask.app.known())
        return as_json(redact_data(body(kind, filters, store.query(kind, filters))))
    except BadParameter as e:
        return _error(400, str(e))
    except StoreError as e:
        log.warning("the store could not answer: %s", e.problems[0] if e.problems else e)
        return _error(503, e.problems[0] if e.problems else str(e))
