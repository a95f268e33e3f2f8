"""One query of the store is bounded: an answer past `MAX_ROWS` rows or a statement past the
time limit is refused with one line naming the limit (`TooMuch`, exit 2 from `pipeline
query`), while a query within them answers; a cursor is refused unless it holds a time and
an id a row can have."""
from __future__ import annotations

import pytest

from big_store import NAMES, WEEK, many_counts
from pipeline.cli import main
from pipeline.store.filters import MAX_ROWS, BadParameter, Cursor, TooMuch, parse
from pipeline.store.queries import Store
from store_rows import T0, make_store, synthetic


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> str:
    return many_counts(str(tmp_path_factory.mktemp("big") / "store.db"))


def minutes(days: int) -> dict:
    return {"bucket": ["minute"], "after": [str(T0)], "before": [str(T0 + days * 86400)],
            "group": ["camera,kind,name"]}


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
    status = main(["query", "counts", "--store", big, "--bucket", "minute", "--after", str(T0),
                   "--before", str(T0 + WEEK), "--group", "camera,kind,name"])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.splitlines() == [f"error: counts: the answer would hold more than {MAX_ROWS} rows, the store's limit "
                                "for one query: ask for a shorter range, a longer bucket or fewer groups"]


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
