"""The store's queries answer from a real database what its rows hold: every filter
selects exactly the rows a plain reading of them selects, pages follow each other
without a duplicate or a gap (rows written meanwhile included), counts and activity sum
what was stored, and hostile parameters are refused with one line naming them before
any SQL runs."""
from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict

import pytest

from pipeline.store import filters as flt
from pipeline.store.filters import BadParameter, ConfigNames, Cursor, Known, parse
from pipeline.store.queries import Store
from pipeline.store.tables import StoreError
from store_rows import CAMERAS, ROLLUP, T0, TRACK, connect, execute, make_store, roll_up, synthetic


@pytest.fixture(scope="module")
def data():
    return synthetic()


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    """Where a new store goes: a SQLite file, or an empty database of a real PostgreSQL
    server (`postgres_url`: skipped where none is installed, a failure in CI)."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "store.db")


@pytest.fixture
def store(location, data):
    s = Store.open(make_store(location, data))
    yield s
    s.close()


def all_pages(store: Store, kind: str, params: dict) -> list[dict]:
    rows, cursor = [], None
    while True:
        page = store.query(kind, parse(kind, {**params, **({"cursor": [cursor]} if cursor else {})}))
        rows += page.rows
        cursor = page.next
        if cursor is None:
            return rows


def expected_tracks(data: dict, keep) -> list[int]:
    zones, lines = defaultdict(set), defaultdict(set)
    for tid, z in data["zones"]:
        zones[tid].add(z)
    for tid, n, d in data["lines"]:
        lines[tid].add((n, d))
    rows = [t for t in data["tracks"] if keep(t, zones[t[0]], lines[t[0]])]
    return [t[0] for t in sorted(rows, key=lambda t: (t[5], t[0]), reverse=True)]


CASES = {
    "camera": ({"camera": ["gate,yard"]}, lambda t, z, l: t[2] in ("gate", "yard")),
    "class": ({"class": ["car"]}, lambda t, z, l: t[4] == "car"),
    "zone": ({"zone": ["lawn"]}, lambda t, z, l: "lawn" in z),
    "line and direction": ({"line": ["street"], "direction": ["in"]}, lambda t, z, l: ("street", "in") in l),
    "label": ({"label": ["red"]}, lambda t, z, l: json.loads(t[10]).get("colour") == "red"),
    "time range": ({"after": ["2026-11-23T12:00:00"], "before": [str(T0 + 86400)]},
                   lambda t, z, l: T0 + 43200 <= t[5] < T0 + 86400),
    "class, zone and range": ({"class": ["person"], "zone": ["path"], "after": [str(T0)],
                               "before": ["2026-11-24T00:00:00+00:00"]},
                              lambda t, z, l: t[4] == "person" and "path" in z and T0 <= t[5] < T0 + 86400),
}


@pytest.mark.parametrize("case", CASES)
def test_each_track_filter_selects_exactly_the_matching_tracks_newest_first(store, data, case):
    params, keep = CASES[case]
    want = expected_tracks(data, keep)
    got = [r["id"] for r in all_pages(store, "tracks", {**params, "limit": ["1000"]})]
    assert want and got == want


def test_pages_follow_each_other_without_duplicates_or_gaps_through_ties(store, data):
    want = expected_tracks(data, lambda t, z, l: True)
    rows = all_pages(store, "tracks", {"limit": ["7"]})
    assert [r["id"] for r in rows] == want
    tied = [r for r in rows if r["first_seen"] == T0 + 3600]
    assert len(tied) > 7  # the tie spans page boundaries


def test_rows_written_while_paging_neither_repeat_nor_shift_the_pages(store, data):
    first = store.tracks(parse("tracks", {"limit": ["50"]}))
    newest = max(t[5] for t in data["tracks"]) + 10
    execute(store.location, f"INSERT INTO tracks ({TRACK}) VALUES ({', '.join('?' * 16)})",
            10_000, 1, "gate", 10_000, "car", newest, newest, 0.5, None, None, "{}", "[]", "[]", None, None, None)
    rest = all_pages(store, "tracks", {"limit": ["50"], "cursor": [first.next]})
    ids = [r["id"] for r in first.rows + rest]
    assert ids == expected_tracks(data, lambda t, z, l: True)
    assert store.tracks(parse("tracks", {"limit": ["1"]})).rows[0]["id"] == 10_000


def test_tracks_come_with_their_json_decoded(store):
    row = store.tracks(parse("tracks", {"class": ["car"], "limit": ["1"]})).rows[0]
    assert row["best_box"] == [1, 2, 3, 4] and isinstance(row["zones"], list) and "colour" in row["labels"]


def test_events_filter_by_kind_and_by_zone_or_line(store, data):
    got = all_pages(store, "events", {"event": ["cross"], "direction": ["out"], "limit": ["13"]})
    want = [e[0] for e in sorted(data["events"], key=lambda e: (e[3], e[0]), reverse=True)
            if e[4] == "cross" and e[9] == "out"]
    assert [e["id"] for e in got] == want and want
    either = all_pages(store, "events", {"zone": ["lawn"], "line": ["entry"], "limit": ["1000"]})
    assert {e["id"] for e in either} == {e[0] for e in data["events"] if e[8] == "lawn" or e[7] == "entry"}


@pytest.mark.parametrize("bucket", ["minute", "hour", "day"])
def test_counts_sum_the_stored_minutes_into_their_buckets(store, data, bucket):
    width = flt.BUCKETS[bucket]
    after, before = T0 + 3630, T0 + (2 * 86400 - 30 if bucket != "minute" else 5 * 3600 + 30)
    got = store.counts(parse("counts", {"bucket": [bucket], "after": [str(after)], "before": [str(before)],
                                        "group": ["camera,kind"], "class": ["person", "car"]}))
    want: dict = defaultdict(Counter)
    for (cam, minute, kind, _, cls, _), n in data["counts"].items():
        if after // width * width <= minute < -(-before // width) * width and cls in ("person", "car"):  # whole buckets
            want[(cam, kind)][minute // width * width] += n
    assert {(s["camera"], s["kind"]): dict(s["points"]) for s in got} == {k: dict(v) for k, v in want.items()}
    assert all(p == sorted(p) for p in (s["points"] for s in got))


def test_counts_of_named_lines_and_zones_take_either_kind(store, data):
    got = store.counts(parse("counts", {"bucket": ["day"], "after": [str(T0)], "before": [str(T0 + 2 * 86400)],
                                        "line": ["street"], "zone": ["path"], "group": ["name,direction"]}))
    want = Counter()
    for (_, _, kind, name, _, d), n in data["counts"].items():
        if (kind, name) in (("line", "street"), ("zone", "path")):
            want[(name, d)] += n
    assert {(s["name"], s["direction"]): sum(n for _, n in s["points"]) for s in got} == want


def segments_store(location: str) -> Store:
    segments = [(cam, f"rec/{cam}/{h}.mp4", T0 + h * 600, T0 + (h + 1) * 600, 1000, 60.0, 300.0)
                for cam in ("gate", "yard") for h in range(12)]
    events = [(i, 1, "gate", T0 + 90 * i, "enter", i, "person", None, "lawn", "enter") for i in range(1, 40)]
    data = {"tracks": [], "zones": [], "lines": [], "events": events, "counts": {}, "segments": segments}
    return Store.open(make_store(location, data))


def test_segments_of_a_range_include_the_one_running_into_it_and_page_oldest_first(location):
    store = segments_store(location)
    rows = all_pages(store, "segments", {"camera": ["gate"], "after": [str(T0 + 650)],
                                         "before": [str(T0 + 3000)], "limit": ["2"]})
    assert [r["path"] for r in rows] == [f"rec/gate/{h}.mp4" for h in (1, 2, 3, 4)]
    every = all_pages(store, "segments", {"after": [str(T0 + 650)], "before": [str(T0 + 1300)]})
    assert sorted(r["path"] for r in every) == [f"rec/{c}/{h}.mp4" for c in ("gate", "yard") for h in (1, 2)]


def test_activity_spreads_each_segments_seconds_over_its_buckets_and_counts_events(location):
    store = segments_store(location)
    cams = store.activity(parse("activity", {"bucket": ["minute"], "after": [str(T0)],
                                             "before": [str(T0 + 7200)]}))
    assert set(cams) == {"gate", "yard"}
    for cam, buckets in cams.items():
        assert len(buckets) == 120 and sum(b[1] for b in buckets) == pytest.approx(12 * 60.0)
        assert sum(b[2] for b in buckets) == pytest.approx(12 * 300.0)
        assert buckets[0][1] == pytest.approx(6.0)  # a tenth of a 600 s segment's 60 s of motion
    assert sum(b[3] for b in cams["gate"]) == 39 and sum(b[3] for b in cams["yard"]) == 0
    hourly = store.activity(parse("activity", {"bucket": ["hour"], "after": [str(T0 + 1800)],
                                               "before": [str(T0 + 3600)]}))
    assert hourly["gate"][0][:3] == [int(T0), pytest.approx(180.0), pytest.approx(900.0)]  # half an hour's share


HOSTILE = [
    ("tracks", {"camera": ["gate' OR '1'='1"]}, "camera"),
    ("tracks", {"camera": ["gate; DROP TABLE tracks; --"]}, "camera"),
    ("tracks", {"after": ["yesterday"]}, "after"),
    ("tracks", {"before": ["2026-13-45T99:00"]}, "before"),
    ("tracks", {"after": ["1e400"]}, "after"),
    ("tracks", {"after": ["nan"]}, "after"),
    ("tracks", {"after": ["-5"]}, "after"),
    ("tracks", {"after": ["2026-11-24"], "before": ["2026-11-23"]}, "before"),
    ("tracks", {"limit": ["-1"]}, "limit"),
    ("tracks", {"limit": ["0"]}, "limit"),
    ("tracks", {"limit": ["1001"]}, "limit"),
    ("tracks", {"limit": ["10; DELETE FROM tracks"]}, "limit"),
    ("tracks", {"limit": ["1", "2"]}, "limit"),
    ("tracks", {"cursor": ["not-a-cursor"]}, "cursor"),
    ("tracks", {"cursor": [Cursor("events", 1.0, 2).encode()]}, "cursor"),
    ("tracks", {"cursor": ["WyJ0cmFja3MiLCAiMSBPUiAxPTEiLCAyXQ"]}, "cursor"),  # ["tracks", "1 OR 1=1", 2]
    ("tracks", {"cursor": [Cursor("tracks", 1e308, 2).encode()]}, "cursor"),  # finite, yet no time a row holds
    ("events", {"cursor": [Cursor("events", -1.0, 2).encode()]}, "cursor"),
    ("events", {"cursor": [Cursor("events", T0, -5).encode()]}, "cursor"),
    ("segments", {"cursor": [Cursor("segments", T0, 2**63).encode()]}, "cursor"),
    ("tracks", {"class": ["x" * 201]}, "class"),
    ("tracks", {"class": [",".join(str(i) for i in range(65))]}, "class"),
    ("tracks", {"event": ["cross"]}, "event"),
    ("tracks", {"direction": ["sideways"]}, "direction"),
    ("tracks", {"id; --": ["1"]}, "id; --"),
    ("events", {"event": ["cross' --"]}, "event"),
    ("events", {"label": ["red"]}, "label"),
    ("counts", {"bucket": ["week"]}, "bucket"),
    ("counts", {"group": ["camera,n); DROP TABLE counts; --"]}, "group"),
    ("counts", {"after": ["2020-01-01"], "before": ["2026-01-01"]}, "after"),
    ("counts", {"bucket": ["minute"], "after": ["2026-01-01"], "before": ["2026-01-09"]}, "after"),
    ("activity", {"bucket": ["minute"], "after": ["0"], "before": ["2000000"]}, "after"),
    ("segments", {"limit": ["10001"]}, "limit"),
]


@pytest.mark.parametrize("kind,params,name", HOSTILE, ids=[f"{k}-{n}-{i}" for i, (k, _, n) in enumerate(HOSTILE)])
def test_hostile_parameters_are_refused_with_one_line_naming_them(kind, params, name):
    with pytest.raises(BadParameter) as e:
        parse(kind, params)
    line = str(e.value)
    assert "\n" not in line and (line.startswith(f"{name}:") or line.startswith(f"'{name}':")), line


def test_a_class_zone_or_line_neither_the_store_nor_the_run_names_is_refused_and_sql_in_it_stays_a_value(
        store, data):
    named = Known(classes=frozenset({"truck"}), zones=frozenset({"porch"}), lines=frozenset({"kerb"}))
    for name, value in (("class", "car' OR '1'='1"), ("class", "car\") OR 1=1 --"), ("zone", "%"), ("line", "_"),
                        ("zone", "lawn'; DROP TABLE tracks; --"), ("class", "tram"), ("line", "kerb' OR 'a'='a")):
        for known in (Known(), named):
            with pytest.raises(BadParameter, match=rf"^{name}: no such {name} in the store: "):
                store.check_known(parse("tracks", {name: ["person", value] if name == "class" else [value]}), known)
        assert store.tracks(parse("tracks", {name: [value]})).rows == []  # were it asked: only ever a value
    store.check_known(parse("events", {"class": ["person,car"], "zone": ["lawn"], "line": ["entry"]}))
    assert store.fetch("SELECT COUNT(*) FROM tracks", [])[0][0] == len(data["tracks"])


def test_a_class_zone_or_line_the_run_names_but_no_row_holds_answers_empty(store):
    """"Trucks this week" of a store that saw none yet, a zone configured this morning:
    nothing matches, which is an answer, not a mistake. The store alone does not know them."""
    named = Known(classes=frozenset({"truck", "car"}), zones=frozenset({"porch"}), lines=frozenset({"kerb"}))
    for kind, params in (("tracks", {"class": ["truck"]}), ("tracks", {"zone": ["porch"], "class": ["car"]}),
                         ("events", {"line": ["kerb"]}), ("counts", {"class": ["truck"], "after": [str(T0)]}),
                         ("counts", {"zone": ["porch"], "line": ["kerb"], "after": [str(T0)]})):
        f = parse(kind, params)
        store.check_known(f, named)
        answer = store.query(kind, f)
        assert (answer.rows if kind != "counts" else answer) == [], (kind, params)
        with pytest.raises(BadParameter, match=r"^(class|zone|line): no such "):
            store.check_known(f)


def test_a_zone_or_class_only_the_counts_still_hold_is_known(store):
    """Counts are kept longer than tracks: a name whose tracks have aged out still counts."""
    for table in ("tracks", "track_zones", "track_lines"):
        execute(store.location, f"DELETE FROM {table}")
    store.check_known(parse("counts", {"class": ["bicycle"], "zone": ["path"], "line": ["street"]}))
    with pytest.raises(BadParameter, match="^zone: no such zone in the store: 'entry'"):
        store.check_known(parse("counts", {"zone": ["entry"]}))  # a line's name, not a zone's


def test_a_camera_the_store_and_the_run_do_not_know_is_refused(store):
    store.check_known(parse("tracks", {"camera": ["gate"]}))
    store.check_known(parse("tracks", {"camera": ["porch"]}), Known(cameras=frozenset({"porch"})))
    with pytest.raises(BadParameter, match=r"^camera: no such camera in the store: 'porch'"):
        store.check_known(parse("tracks", {"camera": ["gate,porch"]}))
    assert store.cameras() == sorted(CAMERAS)


def test_the_names_a_config_gives_are_its_detectors_labels_its_cameras_and_every_cameras_lines_and_zones(
        tmp_path, model_path, sample_path, coco_labels):
    """Classifier labels are `label`, never `class`; lines and zones follow the specs the
    run goes on with (a reload renames them), gathered again only when those change."""
    from dataclasses import replace

    from pipeline.config import AnalyticsSpec, parse_config
    from conftest import classifier_model, detector_model

    square = [[0, 0], [40, 0], [40, 40], [0, 40]]
    config = parse_config({
        "sources": [{"id": "front", "uri": sample_path("vtest.mp4")}, {"id": "back", "uri": sample_path("bikes.mp4")}],
        "models": {"det": detector_model(model_path), "cls": classifier_model(model_path)},
        "graph": [{"detect": {"model": "det"}}, "track", {"classify": {"model": "cls"}}, {"analytics": {"cameras": {
            "front": {"zones": [{"name": "steps", "polygon": square}], "lines": [{"name": "kerb", "points": square[:2]}]},
            "back": {"zones": [{"name": "shed", "polygon": square}]}}}}]}, tmp_path)
    names = ConfigNames(config)()
    assert names == Known(frozenset({"front", "back"}), frozenset(coco_labels), frozenset({"steps", "shed"}),
                          frozenset({"kerb"}))
    analytics = next(s for s in config.graph if isinstance(s, AnalyticsSpec))
    live = [analytics]
    named = ConfigNames(config, lambda: live)
    assert named() is named()
    back = replace(analytics.cameras["back"], zones=[replace(analytics.cameras["back"].zones[0], name="garage")])
    live = [replace(analytics, cameras={**analytics.cameras, "back": back})]
    assert named().zones == {"steps", "garage"} and named().classes == names.classes


def test_times_are_read_as_iso_8601_in_utc_unless_zoned_or_as_epoch_seconds():
    assert flt.parse_time("after", "2026-11-23T00:00:00") == T0
    assert flt.parse_time("after", "2026-11-23T00:00:00Z") == T0
    assert flt.parse_time("after", "2026-11-23T01:00:00+01:00") == T0
    assert flt.parse_time("after", str(T0)) == T0
    assert flt.parse_time("after", "2026-11-23") == T0


def test_counts_and_activity_default_to_a_bounded_range_ending_now():
    f = parse("counts", {}, now=T0)
    assert (f.after, f.before, f.bucket) == (T0 - 86400, T0, "hour")
    f = parse("activity", {"bucket": ["minute"], "after": [str(T0)]}, now=0)
    assert (f.after, f.before) == (T0, T0 + 3600)


def test_opening_what_is_not_a_store_says_why(tmp_path):
    with pytest.raises(StoreError, match="no such file"):
        Store.open(str(tmp_path / "missing.db"))
    sqlite3.connect(tmp_path / "empty.db").execute("CREATE TABLE x (a)")
    with pytest.raises(StoreError, match="holds no store"):
        Store.open(str(tmp_path / "empty.db"))
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError, match="cannot be read as a store"):
        Store.open(str(tmp_path / "junk.db"))
    assert not (tmp_path / "missing.db").exists()


def test_hour_and_day_buckets_read_the_hourly_rollup_and_minutes_the_minutes(store):
    """The rollup (`counts_hour`, written with the minutes) answers hour and day buckets:
    minutes changed alone change minute buckets only."""
    if not store.has_table("counts_hour"):  # a schema without one: made here as the writer would keep it
        execute(store.location, ROLLUP)
        conn, d = connect(store.location)
        roll_up(conn.cursor(), d)
        conn.commit()
        conn.close()
        store = Store.open(store.location)
    params = {"after": [str(T0 + 1000)], "before": [str(T0 + 40 * 3600 + 5)], "group": ["camera,name,class"]}
    before = {b: store.counts(parse("counts", {**params, "bucket": [b]})) for b in ("hour", "day")}
    minutes = store.counts(parse("counts", {**params, "bucket": ["minute"], "before": [str(T0 + 7 * 3600)]}))
    execute(store.location, "UPDATE counts SET n = n * 1000")
    assert {b: store.counts(parse("counts", {**params, "bucket": [b]})) for b in before} == before
    changed = store.counts(parse("counts", {**params, "bucket": ["minute"], "before": [str(T0 + 7 * 3600)]}))
    assert [[n * 1000 for _, n in s["points"]] for s in minutes] == [[n for _, n in s["points"]] for s in changed]


def test_a_store_of_an_older_schema_opens_brought_up_to_date_and_a_newer_one_is_refused(location, data,
                                                                                         monkeypatch):
    from pipeline.store import connections, tables

    make_store(location, data)
    step = tables.Migration(tables.SCHEMA_VERSION + 1, "a note per run", ("ALTER TABLE runs ADD COLUMN note TEXT",))
    for module in (tables, connections):
        monkeypatch.setattr(module, "SCHEMA_VERSION", step.version)
    monkeypatch.setattr(tables, "MIGRATIONS", tables.MIGRATIONS + [step])
    store = Store.open(location)
    assert store.fetch("SELECT note FROM runs", []) == []
    assert store.tracks(parse("tracks", {"limit": ["1000"]})).rows and store.fetch(
        "SELECT value FROM meta WHERE key = 'schema_version'", []) == [(str(step.version),)]
    store.close()
    monkeypatch.setattr(connections, "SCHEMA_VERSION", step.version - 1)
    monkeypatch.setattr(tables, "SCHEMA_VERSION", step.version - 1)
    with pytest.raises(StoreError, match=f"version {step.version}, newer than this pipeline's {step.version - 1}"):
        Store.open(location)
