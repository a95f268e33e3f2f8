"""The store over HTTP (`GET /api/store/<query>`: tracks, events, counts, segments,
activity), with the token as for the rest of the API. Parameters are checked by
`store.filters` (and a camera must be one the store or the run knows): a bad one is 400
with `{"error": "<one line naming it>"}`; a store that cannot be read is 503 with its
line; a run without a store (`outputs.store: false`) answers 404.
"""
from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from pipeline.redact import redact, redact_data
from pipeline.store.filters import ACCEPTED, BadParameter, parse
from pipeline.store.queries import body
from pipeline.store.tables import StoreError

if TYPE_CHECKING:
    from pipeline.web.request import Request

log = logging.getLogger("pipeline.web")

PREFIX = "/api/store/"


def _error(handler: Request, status: int, line: str) -> None:
    handler.send(status, json.dumps({"error": redact(line)}).encode(), "application/json")


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
    try:
        filters = parse(kind, query)
        store.check_cameras(filters, handler.app.cameras())
        answer = store.query(kind, filters)
    except BadParameter as e:
        _error(handler, 400, str(e))
        return
    except StoreError as e:
        log.warning("the store could not answer: %s", e.problems[0] if e.problems else e)
        _error(handler, 503, e.problems[0] if e.problems else str(e))
        return
    handler.send(200, json.dumps(redact_data(body(kind, filters, answer))).encode(), "application/json")
