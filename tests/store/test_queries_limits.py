"""One query of the store is bounded: a query that would read past `MAX_READ` rows (refused
before it reads), an answer past `MAX_ROWS` rows or a statement past the time limit is refused with one line naming the limit (`TooMuch`, exit 2 from `pipeline
query`), while a query within them answers; a cursor is refused unless it holds a time and
an id a row can have."""
from __future__ import annotations

import pytest

from big_store import NAMES, WEEK, many_counts
from pipeline.cli import main
from pipeline.store import queries
from pipeline.store.filters import MAX_READ, MAX_ROWS, BadParameter, Cursor, TooMuch, parse
from pipeline.store.queries import Store
from store_rows import T0, make_store, synthetic


CAMERAS = ("gate", "yard")  # each a week of counts within MAX_READ, both past it


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> str:
    return many_counts(str(tmp_path_factory.mktemp("big") / "store.db"), CAMERAS)


def minutes(days: int, camera: str = "gate") -> dict:
    return {"bucket": ["minute"], "after": [str(T0)], "before": [str(T0 + days * 86400)],
            "group": ["camera,kind,name"], "camera": [camera] if camera else []}


def traced(store: Store) -> list[str]:
    """The statements the store runs from now on, in this thread (its one idle connection,
    lent again to each query)."""
    statements: list[str] = []
    with store.connection() as conn:
        conn.set_trace_callback(statements.append)
    return statements


def test_counts_that_would_read_past_the_read_limit_are_refused_before_anything_is_grouped(big):
    assert len(CAMERAS) * WEEK // 60 * NAMES > MAX_READ > WEEK // 60 * NAMES
    store = Store.open(big)
    statements = traced(store)
    for group in ("camera,kind,name,class,direction", "camera"):
        with pytest.raises(TooMuch, match=rf"^counts: the query would read more than {MAX_READ} rows of counts, the "
                                          "store's limit for one query: ask for a longer bucket, fewer cameras or a "
                                          "shorter range$"):
            store.query("counts", parse("counts", {**minutes(7, ""), "group": [group]}))
    assert statements and not [s for s in statements if "GROUP BY" in s or "SUM(" in s]
    one = store.query("counts", parse("counts", {**minutes(7), "group": ["camera"]}))  # one camera: within it
    counted = store.fetch("SELECT SUM(n) FROM counts WHERE camera = 'gate' AND minute < ?", [T0 + WEEK])[0][0]
    assert [s["camera"] for s in one] == ["gate"] and sum(n for _, n in one[0]["points"]) == counted
    assert [s for s in statements if "GROUP BY" in s]
    store.close()


def test_activity_that_would_read_past_the_read_limit_is_refused_before_its_events_are_counted(tmp_path,
                                                                                               monkeypatch):
    store = Store.open(make_store(str(tmp_path / "store.db"), synthetic(400)))
    events = store.fetch("SELECT COUNT(*) FROM events", [])[0][0]
    days = parse("activity", {"bucket": ["hour"], "after": [str(T0)], "before": [str(T0 + 3 * 86400)]})
    statements = traced(store)
    monkeypatch.setattr(queries, "MAX_READ", events - 1)
    with pytest.raises(TooMuch, match=rf"^activity: the query would read more than {events - 1} rows of events"):
        store.query("activity", days)
    assert statements and not [s for s in statements if "FROM events AS e" in s or '"end" >' in s]
    monkeypatch.setattr(queries, "MAX_READ", events)
    answer = store.query("activity", days)
    assert sum(n for buckets in answer.values() for *_, n in buckets) == events
    assert [s for s in statements if "FROM events AS e" in s]
    store.close()


def test_counts_past_the_row_limit_are_refused_naming_it_and_a_day_of_them_answers(big):
    store = Store.open(big)
    assert WEEK // 60 * NAMES > MAX_ROWS > 86400 // 60 * NAMES
    with pytest.raises(TooMuch, match=rf"^counts: the answer would hold more than {MAX_ROWS} rows, the store's "
                                      "limit for one query: ask for a shorter range, a longer bucket or fewer"):
        store.query("counts", parse("counts", minutes(7)))
    day = store.query("counts", parse("counts", minutes(1)))
    assert len(day) >= NAMES and sum(n for s in day for _, n in s["points"]) >= 86400 // 60 * NAMES
    hours = store.query("counts", parse("counts", {**minutes(7), "bucket": ["hour"]}))  # the rollup: few rows
    assert sum(n for s in hours for _, n in s["points"]) >= WEEK // 60 * NAMES
    store.close()


def test_pipeline_query_past_the_row_limit_is_one_error_line_and_exit_2(big, capsys):
    week = ["query", "counts", "--store", big, "--bucket", "minute", "--after", str(T0), "--before", str(T0 + WEEK),
            "--group", "camera,kind,name"]
    status = main([*week, "--camera", "gate"])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.splitlines() == [f"error: counts: the answer would hold more than {MAX_ROWS} rows, the store's limit "
                                "for one query: ask for a shorter range, a longer bucket or fewer groups"]
    status = main(week)
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.splitlines() == [f"error: counts: the query would read more than {MAX_READ} rows of counts, the "
                                "store's limit for one query: ask for a longer bucket, fewer cameras or a shorter range"]


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "store.db")


def test_a_query_past_the_time_limit_is_interrupted_and_refused_naming_the_limit(location):
    make_store(location, synthetic(400))
    store = Store.open(location)
    store.time_limit_s = 0.001
    store.close()  # connections opened from now on carry the limit
    heavy = ("SELECT COUNT(*) FROM tracks AS a, tracks AS b, tracks AS c" if not location.startswith("postgresql")
             else "SELECT pg_sleep(5)")
    with pytest.raises(TooMuch, match=r"^the query ran past 0.001 s, the store's limit for one query"):
        store.fetch(heavy, [])
    store.close()
    again = Store.open(location)  # the store still answers, within the limit
    assert again.fetch("SELECT COUNT(*) FROM tracks", []) == [(400,)]
    again.close()


@pytest.mark.parametrize("cursor", [Cursor("tracks", 1e308, 1), Cursor("tracks", -0.5, 1), Cursor("tracks", T0, -1),
                                    Cursor("tracks", T0, 2**63)])
def test_a_cursor_holding_no_time_or_id_a_row_can_have_is_refused(cursor):
    with pytest.raises(BadParameter, match="^cursor: not a cursor of tracks"):
        parse("tracks", {"cursor": [cursor.encode()]})
    assert parse("tracks", {"cursor": [Cursor("tracks", T0, 7).encode()]}).cursor == Cursor("tracks", T0, 7)
