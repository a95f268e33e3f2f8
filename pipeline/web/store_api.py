"""The store over HTTP (`GET /api/store/<query>`: tracks, events, counts, segments,
activity), with the token as for the rest of the API. Parameters are checked by
`store.filters` (and a camera, class, zone or line must be one the store holds or the run
names: `WebServer.known`, the lines and zones as the last reload left them): a bad one is 400
with `{"error": "<one line naming it>"}`; a store that cannot be read is 503 with its
line; a run without a store (`outputs.store: false`) answers 404.

A query past the store's limits for one (rows, time: `store.queries`) is a 400 naming the
limit. `AT_ONCE` queries are answered together; more wait up to `WAIT_S` for one to end,
then are a 503: however many clients ask, the store's readers hold at most `AT_ONCE`
answers in memory and `AT_ONCE` cores, and the cameras keep the rest.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING

from pipeline.redact import redact, redact_data
from pipeline.store.filters import ACCEPTED, BadParameter, parse
from pipeline.store.queries import body
from pipeline.store.tables import StoreError

if TYPE_CHECKING:
    from pipeline.web.request import Request

log = logging.getLogger("pipeline.web")

PREFIX = "/api/store/"
AT_ONCE = 2
WAIT_S = 10.0  # at most a query's time limit: a waiting request gets the place of one that ran out
_running = threading.BoundedSemaphore(AT_ONCE)


def _error(handler: Request, status: int, line: str, headers: dict[str, str] | None = None) -> None:
    handler.send(status, json.dumps({"error": redact(line)}).encode(), "application/json", headers)


def serve(handler: Request, path: str, query: dict[str, list[str]]) -> None:
    """`GET /api/store/<kind>?...` (the handler routes every path under `PREFIX` here)."""
    kind = path[len(PREFIX):]
    store = handler.app.store
    if kind not in ACCEPTED:
        _error(handler, 404, f"no such query: /api/store/{{{','.join(ACCEPTED)}}}")
        return
    if store is None:
        _error(handler, 404, "this run keeps no store (outputs.store is off)")
        return
    if not _running.acquire(timeout=WAIT_S):
        _error(handler, 503, f"the store is answering {AT_ONCE} queries already, its limit at once: "
                             "try again in a few seconds", {"Retry-After": "5"})
        return
    try:
        filters = parse(kind, query)
        store.check_known(filters, handler.app.known())
        answer = json.dumps(redact_data(body(kind, filters, store.query(kind, filters)))).encode()
    except BadParameter as e:
        _error(handler, 400, str(e))
        return
    except StoreError as e:
        log.warning("the store could not answer: %s", e.problems[0] if e.problems else e)
        _error(handler, 503, e.problems[0] if e.problems else str(e))
        return
    finally:
        _running.release()
    handler.send(200, answer, "application/json")
