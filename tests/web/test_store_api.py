"""The store over the page's server (`/api/store/...`), on a real HTTP server on
127.0.0.1 with a token: answers are the store's rows as the queries give them, pages
chain through `next`, and every hostile parameter is a 400 whose one line names it."""
from __future__ import annotations

import json
import urllib.parse

import pytest
import yaml

from pipeline.config.outputs import WebConfig
from pipeline.metrics.snapshot import Snapshot
from pipeline.sinks.preview import Preview
from pipeline.store.queries import Store
from pipeline.web.server import WebServer
from store_rows import T0, make_store, synthetic
from web_support import get, wait_for

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def data():
    return synthetic(300, seed=3)


def serve(store: Store | None):
    preview = Preview()
    server = WebServer(WebConfig(port=0, token=TOKEN), Snapshot, preview, cameras=lambda: ["porch"], store=store)
    server.start()
    return server, preview


@pytest.fixture(scope="module")
def base(tmp_path_factory, data):
    server, preview = serve(Store(make_store(str(tmp_path_factory.mktemp("store") / "store.db"), data)))
    yield f"http://127.0.0.1:{server.port}/api/store"
    server.close()
    preview.close()


def ask(url: str, **params) -> tuple[int, dict]:
    status, body, headers = get(f"{url}?{urllib.parse.urlencode(params, doseq=True)}", AUTH)
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(body)


def test_the_token_is_needed_as_for_the_rest_of_the_api(base):
    assert get(f"{base}/tracks")[0] == 401
    assert get(f"{base}/tracks?token={TOKEN}")[0] == 200


def test_tracks_by_class_and_zone_page_through_next_without_duplicates_or_gaps(base, data):
    in_lawn = {tid for tid, z in data["zones"] if z == "lawn"}
    want = [t[0] for t in sorted(data["tracks"], key=lambda t: (t[5], t[0]), reverse=True)
            if t[4] == "car" and t[0] in in_lawn]
    got, cursor = [], None
    while True:
        status, answer = ask(f"{base}/tracks", **{"class": "car", "zone": "lawn", "limit": 4},
                             **({"cursor": cursor} if cursor else {}))
        assert status == 200 and len(answer["tracks"]) <= 4
        got += [t["id"] for t in answer["tracks"]]
        cursor = answer["next"]
        if cursor is None:
            break
    assert want and got == want
    first = ask(f"{base}/tracks", **{"class": "car", "limit": 1})[1]["tracks"][0]
    assert set(first) >= {"id", "camera", "track", "class", "first_seen", "last_seen", "best_score", "best_box",
                          "labels", "zones", "lines", "snapshot", "recording", "recording_time"}


def test_counts_events_segments_and_activity_answer_in_their_shapes(base, data):
    status, counts = ask(f"{base}/counts", bucket="day", after="2026-11-23", before="2026-11-25", group="camera")
    assert status == 200 and counts["bucket"] == "day" and counts["after"] == T0
    assert sum(n for s in counts["series"] for _, n in s["points"]) == sum(data["counts"].values())
    status, events = ask(f"{base}/events", event="cross", limit=1000)
    assert status == 200 and len(events["events"]) == sum(e[4] == "cross" for e in data["events"])
    assert ask(f"{base}/segments", after=str(T0))[1] == {"segments": [], "next": None}
    status, activity = ask(f"{base}/activity", after=str(T0), before=str(T0 + 86400), bucket="hour")
    day_one = sum(1 for e in data["events"] if e[3] < T0 + 86400)
    assert status == 200 and sum(b[3] for bs in activity["cameras"].values() for b in bs) == day_one


HOSTILE = [
    ("tracks", {"camera": "gate' OR '1'='1"}, "camera"),
    ("tracks", {"camera": "nowhere"}, "camera"),
    ("tracks", {"class": "car' UNION SELECT * FROM runs --", "limit": "-5"}, "limit"),
    ("tracks", {"after": "2026-02-30T10:00"}, "after"),
    ("tracks", {"before": "tomorrow"}, "before"),
    ("tracks", {"limit": "100000000000000000000"}, "limit"),
    ("tracks", {"cursor": "eyJ0IjogMX0"}, "cursor"),
    ("tracks", {"order": "id; DROP TABLE tracks"}, "'order'"),
    ("events", {"event": "drop"}, "event"),
    ("counts", {"after": "1970-01-01", "before": "2026-01-01"}, "after"),
    ("counts", {"bucket": "minute", "after": "2026-11-01", "before": "2026-11-23"}, "after"),
    ("counts", {"group": "camera,(SELECT 1)"}, "group"),
    ("activity", {"bucket": "second"}, "bucket"),
]


@pytest.mark.parametrize("kind,params,name", HOSTILE, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(HOSTILE)])
def test_hostile_parameters_get_400_with_one_line_naming_them(base, data, kind, params, name):
    status, answer = ask(f"{base}/{kind}", **params)
    assert status == 400 and set(answer) == {"error"}
    assert answer["error"].startswith(f"{name}:") and "\n" not in answer["error"], answer
    assert len(ask(f"{base}/tracks", limit=1000)[1]["tracks"]) == len(data["tracks"])  # nothing was touched


def test_a_camera_of_the_run_not_yet_in_the_store_answers_empty(base):
    assert ask(f"{base}/tracks", camera="porch") == (200, {"tracks": [], "next": None})


def test_an_unknown_query_a_run_without_store_and_an_unreadable_store_say_so(base, tmp_path):
    status, answer = ask(f"{base}/runs")
    assert status == 404 and answer["error"].startswith("no such query")
    for store, status, line in ((None, 404, "this run keeps no store"),
                                (Store(str(tmp_path / "gone.db")), 503, "no store there")):
        server, preview = serve(store)
        try:
            got, answer = ask(f"http://127.0.0.1:{server.port}/api/store/tracks")
            assert got == status and line in answer["error"], answer
        finally:
            server.close()
            preview.close()


def test_a_real_runs_page_answers_class_zone_and_range_from_its_store_as_the_json_lines_say(
        tmp_path, model_path, sample_path, coco_labels):
    """The run's own server, the store on by default: the people that entered the lawn, as
    the JSON lines' events name them, are the tracks the API gives for person + lawn; a
    class its detector knows and a zone it draws, never seen, answer empty, as does a zone
    a reload renamed (the name it had is then refused)."""
    import time

    from pipeline.config import load_config, load_yaml, read_config
    from pipeline.graph import Pipeline
    from pipeline.reload import Reloader
    from conftest import detector_model, read_jsonl

    lawn = [[0, 330], [767, 280], [767, 575], [0, 575]]
    corner = {"name": "sky", "polygon": [[0, 0], [6, 0], [6, 6]]}
    config = {"sources": [{"id": "campus", "uri": sample_path("vtest.mp4")}],
              "models": {"det": detector_model(model_path, score_threshold=0.25)},
              "graph": [{"detect": {"model": "det"}}, "track",
                        {"analytics": {"cameras": {"campus": {"zones": [{"name": "lawn", "polygon": lawn}, corner]}}}}],
              "outputs": {"dir": str(tmp_path / "out"), "video": {"enabled": False},
                          "web": {"port": 0, "token": TOKEN}}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    started = time.time()
    p = Pipeline(load_config(str(tmp_path / "run.yaml")), max_frames=120)
    p.start()
    try:
        assert p.wait(300), "the run did not end"
        base = f"http://127.0.0.1:{p.side.web.port}/api/store"
        events = [e for r in read_jsonl(str(tmp_path / "out" / "detections.jsonl")) for e in r.get("events") or []]
        entered = {e["track"] for e in events
                   if e["event"] == "enter" and e["zone"] == "lawn" and e["class"] == "person"}
        # the writer flushes every flush_s: the store holds the last frames' rows a moment after the run ends
        assert wait_for(lambda: len(ask(f"{base}/events", limit=1000)[1]["events"]) == len(events), 10)
        got, cursor = [], None
        while True:
            # a file camera's times are the run's start plus the stream's: ahead of the clock when faster than it
            status, answer = ask(f"{base}/tracks", **{"class": "person", "zone": "lawn", "after": started - 1,
                                                      "before": started + 3600, "limit": 3},
                                 **({"cursor": cursor} if cursor else {}))
            assert status == 200, answer
            got += answer["tracks"]
            if (cursor := answer["next"]) is None:
                break
        assert entered and sorted(t["track"] for t in got) == sorted(entered)
        assert all(t["camera"] == "campus" and "lawn" in t["zones"] for t in got)
        assert ask(f"{base}/tracks", **{"class": "person", "zone": "lawn", "before": started - 1}) == \
            (200, {"tracks": [], "next": None})
        assert ask(f"{base}/tracks", camera="gate")[0] == 400

        rows = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
        unseen = next(c for c in coco_labels if c not in {d["class"] for r in rows for d in r["detections"]})
        assert "sky" not in {e.get("zone") for e in events}
        assert ask(f"{base}/tracks", **{"class": unseen}) == (200, {"tracks": [], "next": None})
        assert ask(f"{base}/events", zone="sky") == (200, {"events": [], "next": None})
        assert ask(f"{base}/counts", **{"class": unseen, "zone": "sky", "after": started - 1})[1]["series"] == []
        for name, value in (("class", f"{unseen}' OR '1'='1"), ("zone", "sky\") OR 1=1 --")):
            status, answer = ask(f"{base}/tracks", **{name: value})
            assert status == 400 and answer["error"].startswith(f"{name}: no such {name} in the store: "), answer
        config["graph"][2]["analytics"]["cameras"]["campus"]["zones"][1]["name"] = "roof"
        (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
        reloaded = Reloader(lambda: read_config(load_yaml(tmp_path / "run.yaml"), tmp_path), p)()
        assert reloaded.applied and not reloaded.problems, reloaded
        assert ask(f"{base}/events", zone="roof") == (200, {"events": [], "next": None})
        assert ask(f"{base}/events", zone="sky")[0] == 400
    finally:
        p.stop(abort=True)
        p.close(timeout=10)
