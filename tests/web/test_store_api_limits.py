"""The store's limits over the page's server: a query past the rows one may read is a 400
naming the limit (one within answers), a value that cannot match is a 400 naming its
parameter (one the run names answers), and past `AT_ONCE` queries at once the next
waits, then is a 503 naming the bound, so clients never take the cameras' memory and
cores; waiting, they hold none of the server's threads, so the page's other answers go on."""
from __future__ import annotations

import json
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

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
    yield f"http://127.0.0.1:{server.port}/api/store", store
    server.close()
    preview.close()


def ask(url: str, **params) -> tuple[int, dict]:
    status, body, _ = get(f"{url}?{urllib.parse.urlencode(params, doseq=True)}")
    return status, json.loads(body)


def test_a_query_past_the_row_limit_is_a_400_naming_it_and_a_shorter_one_answers(base):
    base, _ = base
    week = {"bucket": "minute", "after": T0, "before": T0 + WEEK, "group": "camera,kind,name"}
    status, body = ask(f"{base}/counts", **week)
    assert status == 400 and body["error"].startswith(f"counts: the answer would hold more than {MAX_ROWS} rows")
    status, body = ask(f"{base}/counts", **{**week, "before": T0 + 86400})
    assert status == 200 and len(body["series"]) > 1


def test_sql_in_a_class_or_zone_is_a_400_naming_the_parameter_and_one_the_run_names_answers_empty(base):
    base, _ = base
    for name, value in (("class", "car' OR '1'='1"), ("zone", "lawn\") OR 1=1 --"), ("class", "truck' --")):
        status, body = ask(f"{base}/tracks", **{name: value})
        assert status == 400 and body["error"].startswith(f"{name}: no such {name} in the store: "), body
    for name, value in (("class", "truck"), ("zone", "new bed")):
        assert ask(f"{base}/tracks", **{name: value}) == (200, {"tracks": [], "next": None})


def held_queries(store, monkeypatch) -> tuple[threading.Event, threading.Semaphore]:
    """The store's answers held until the event is set; the semaphore counts those begun."""
    release, begun, real = threading.Event(), threading.Semaphore(0), store.query

    def held(kind, filters):
        begun.release()
        release.wait(30)
        return real(kind, filters)
    monkeypatch.setattr(store, "query", held)
    return release, begun


def test_queries_past_the_bound_wait_holding_no_thread_then_answer(base, monkeypatch):
    """More queries wait than the server has threads: its other answers go on meanwhile
    (a query that waited in a thread took one the page needs for up to WAIT_S)."""
    base, store = base
    release, begun = held_queries(store, monkeypatch)
    with ThreadPoolExecutor(store_api.AT_ONCE + WebServer.WORKERS) as pool:
        try:
            asked = [pool.submit(get, f"{base}/segments", timeout=30) for _ in range(store_api.AT_ONCE)]
            assert all(begun.acquire(timeout=10) for _ in asked)  # both places taken
            asked += [pool.submit(get, f"{base}/segments", timeout=30) for _ in range(WebServer.WORKERS)]
            status, body, _ = get(base.replace("/api/store", "/api/cameras"), timeout=store_api.WAIT_S / 2)
            assert status == 200 and "cameras" in json.loads(body)
        finally:
            release.set()
        assert [f.result()[0] for f in asked] == [200] * len(asked)  # the waiting ones had their turn


def test_queries_past_the_bound_at_once_wait_then_are_a_503_naming_it(base, monkeypatch):
    base, store = base
    monkeypatch.setattr(store_api, "WAIT_S", 0.2)
    release, begun = held_queries(store, monkeypatch)
    with ThreadPoolExecutor(store_api.AT_ONCE) as pool:
        try:
            asked = [pool.submit(get, f"{base}/segments", timeout=30) for _ in range(store_api.AT_ONCE)]
            assert all(begun.acquire(timeout=10) for _ in asked)  # the places of queries still running
            status, body, headers = get(f"{base}/segments")
            assert status == 503 and headers["Retry-After"]
            assert json.loads(body)["error"].startswith(f"the store is answering {store_api.AT_ONCE} queries already")
        finally:
            release.set()
    monkeypatch.undo()
    assert get(f"{base}/segments")[0] == 200
