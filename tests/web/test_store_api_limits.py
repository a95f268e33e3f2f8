"""The store's limits over the page's server: a query past the rows one may read is a 400
naming the limit (one within answers), a value that cannot match is a 400 naming its
parameter (one the run names answers), and past `AT_ONCE` queries at once the next
waits, then is a 503 naming the bound, so clients never take the cameras' memory and
cores."""
from __future__ import annotations

import json
import urllib.parse

import pytest

from big_store import WEEK, many_counts
from pipeline.config.outputs import WebConfig
from pipeline.metrics.snapshot import Snapshot
from pipeline.sinks.preview import Preview
from pipeline.store.filters import MAX_ROWS, Known
from pipeline.store.queries import Store
from pipeline.web import store_api
from pipeline.web.server import WebServer
from store_rows import T0
from web_support import get


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    preview = Preview()
    store = Store(many_counts(str(tmp_path_factory.mktemp("store") / "store.db")))
    server = WebServer(WebConfig(port=0), Snapshot, preview, cameras=lambda: ["porch"], store=store,
                       names=lambda: Known(classes=frozenset({"truck"}), zones=frozenset({"new bed"})))
    server.start()
    yield f"http://127.0.0.1:{server.port}/api/store"
    server.close()
    preview.close()


def ask(url: str, **params) -> tuple[int, dict]:
    status, body, _ = get(f"{url}?{urllib.parse.urlencode(params, doseq=True)}")
    return status, json.loads(body)


def test_a_query_past_the_row_limit_is_a_400_naming_it_and_a_shorter_one_answers(base):
    week = {"bucket": "minute", "after": T0, "before": T0 + WEEK, "group": "camera,kind,name"}
    status, body = ask(f"{base}/counts", **week)
    assert status == 400 and body["error"].startswith(f"counts: the answer would hold more than {MAX_ROWS} rows")
    status, body = ask(f"{base}/counts", **{**week, "before": T0 + 86400})
    assert status == 200 and len(body["series"]) > 1


def test_sql_in_a_class_or_zone_is_a_400_naming_the_parameter_and_one_the_run_names_answers_empty(base):
    for name, value in (("class", "car' OR '1'='1"), ("zone", "lawn\") OR 1=1 --"), ("class", "truck' --")):
        status, body = ask(f"{base}/tracks", **{name: value})
        assert status == 400 and body["error"].startswith(f"{name}: no such {name} in the store: "), body
    for name, value in (("class", "truck"), ("zone", "new bed")):
        assert ask(f"{base}/tracks", **{name: value}) == (200, {"tracks": [], "next": None})


def test_queries_past_the_bound_at_once_wait_then_are_a_503_naming_it(base, monkeypatch):
    monkeypatch.setattr(store_api, "WAIT_S", 0.2)
    for _ in range(store_api.AT_ONCE):  # the places of queries still running
        assert store_api._running.acquire(blocking=False)
    try:
        status, body, headers = get(f"{base}/segments")
        assert status == 503 and headers["Retry-After"]
        assert json.loads(body)["error"].startswith(f"the store is answering {store_api.AT_ONCE} queries already")
    finally:
        for _ in range(store_api.AT_ONCE):
            store_api._running.release()
    assert get(f"{base}/segments")[0] == 200
