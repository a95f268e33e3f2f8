"""Reading the store: tracks and events filtered and paged newest first, counts over time
in buckets, recording segments and the cameras' activity for a range. The HTTP API
(`web.store_api`) and `pipeline query` ask the same `Store`, with parameters checked by
`store.filters`.

Pages are keyset pages: ordered by (time, id), each page's last row is the cursor the
next one starts after, so rows written meanwhile neither repeat nor leave gaps and a
deep page costs what the first does (no OFFSET). Every value is bound (`clauses.Where`).

A track is in a range when it was first seen in it (questions about when something
happened, such as entering a zone, are the events'). Counts resolve to the minute:
buckets are UTC minutes, hours or days. A segment's activity is spread evenly over its
length when buckets are shorter than the segment (it says how many seconds, not when).

One query is bounded: counts and activity read at most `MAX_READ` rows of the store,
counted by the index before anything is read or grouped, and at most `MAX_ROWS` rows into
an answer (a page at most `MAX_LIMIT`); each statement runs at most
`Connections.time_limit_s`; past any, it is `TooMuch`, naming the limit. A camera,
class, zone or line that no row holds and the run does not name (`filters.Known`) cannot
match, and is refused as a bad parameter.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Collection

from pipeline.store.clauses import Where, label_match, marks, minute_bucket
from pipeline.store.connections import Connections
from pipeline.store.filters import MAX_READ, MAX_ROWS, BadParameter, Cursor, Filters, Known, TooMuch, clip
from pipeline.store.tables import Dialect

TRACK_COLUMNS = ("id", "run", "camera", "track", "class", "first_seen", "last_seen", "best_score", "best_box",
                 "best_time", "labels", "zones", "lines", "snapshot", "recording", "recording_time")
EVENT_COLUMNS = ("id", "run", "camera", "time", "event", "track", "class", "line", "zone", "direction",
                 "snapshot", "clip", "recording", "recording_time")
SEGMENT_COLUMNS = ("id", "camera", "path", "start", '"end"', "bytes", "motion_s", "objects_s")
JSON_COLUMNS = ("best_box", "labels", "zones", "lines")
CAMERA_TABLES = ("tracks", "events", "segments", "counts")  # each has an index led by camera
# a filter's values and where rows hold them: the tracks' own table by its index (table,
# column), then the counts' hourly rollup (kept longer than tracks) for those not found
# there (kind: the counts' rows of that kind by name, or None: by class)
NAMES = {"classes": ("class", "tracks", "class", None), "zones": ("zone", "track_zones", "zone", "zone"),
         "lines": ("line", "track_lines", "line", "line")}

@dataclass
class Page:
    rows: list[dict]
    next: str | None  # the cursor of the following page; None on the last one


def _decoded(columns: tuple[str, ...], row: tuple) -> dict:
    out = {}
    for name, value in zip(columns, row):
        name = name.strip('"')
        if name in JSON_COLUMNS and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass  # kept as written: a damaged value is shown, not dropped
        out[name] = value
    return out


def _page(kind: str, columns: tuple[str, ...], rows: list[tuple], limit: int, time_column: str) -> Page:
    """The first `limit` rows (one more was asked for: whether a next page exists)."""
    decoded = [_decoded(columns, r) for r in rows[:limit]]
    more = len(rows) > limit
    last = decoded[-1] if decoded else None
    cursor = Cursor(kind, float(last[time_column]), int(last["id"])).encode() if more and last else None
    return Page(decoded, cursor)


def track_where(f: Filters, dialect: Dialect) -> Where:
    """A track matches every filter given (a zone it visited and a line it crossed), and
    any of one filter's values."""
    w = Where()
    w.any_of("camera", f.cameras)
    w.any_of("class", f.classes)
    w.page("first_seen", f.after, f.before, f.cursor)
    if f.zones:
        inner = Where(["z.track_id = tracks.id"])
        inner.any_of("z.zone", f.zones)
        w.add(f"EXISTS (SELECT 1 FROM track_zones AS z{inner.sql})", *inner.params)
    if f.lines or f.directions:
        inner = Where(["t.track_id = tracks.id"])
        inner.any_of("t.line", f.lines)
        inner.any_of("t.direction", f.directions)
        w.add(f"EXISTS (SELECT 1 FROM track_lines AS t{inner.sql})", *inner.params)
    if f.labels:
        w.add(label_match(dialect, len(f.labels)), *f.labels)
    return w


def event_where(f: Filters) -> Where:
    """An event is at a line or in a zone: given both, either matches."""
    w = Where()
    w.any_of("camera", f.cameras)
    w.any_of("class", f.classes)
    w.any_of("event", f.events)
    w.any_of("direction", f.directions)
    places = Where()
    places.any_of("zone", f.zones)
    places.any_of("line", f.lines)
    if places.conditions:
        w.add(f"({' OR '.join(places.conditions)})", *places.params)
    w.page("time", f.after, f.before, f.cursor)
    return w


def counts_read(f: Filters, column: str = "minute") -> Where:
    """The rows a counts query reads: those of the whole buckets the range touches, at its
    cameras (`column`: the table's time, `minute` or `hour`). These are the ranges of the
    indexes the database reads by ((camera, time) or (time)); the other filters are
    tested row by row, so they narrow the answer, not what is read."""
    w = Where()
    w.at_least(column, int(f.after // f.width * f.width))
    w.below(column, int(-(-f.before // f.width) * f.width))
    w.any_of("camera", f.cameras)
    return w


def counts_where(f: Filters, column: str = "minute") -> Where:
    """Counts of the lines and zones named (either kind) in the rows `counts_read` reads."""
    w = counts_read(f, column)
    w.any_of("class", f.classes)
    w.any_of("direction", f.directions)
    kinds = Where()
    for kind, names in (("line", f.lines), ("zone", f.zones)):
        if names:
            one = Where(["kind = ?"], [kind])
            one.any_of("name", names)
            kinds.add(f"({' AND '.join(one.conditions)})", *one.params)
    if kinds.conditions:
        w.add(f"({' OR '.join(kinds.conditions)})", *kinds.params)
    return w


def series(group: tuple[str, ...], rows: list[tuple]) -> list[dict]:
    """Rows of (group values..., bucket, n), ordered by group, as one series per group."""
    out: list[dict] = []
    key = None
    for row in rows:
        if row[:len(group)] != key:
            key = row[:len(group)]
            out.append({**dict(zip(group, key)), "points": []})
        out[-1]["points"].append([int(row[-2]), int(row[-1])])
    return out


def spread(buckets: dict[int, list], seg: dict, f: Filters) -> None:
    """A segment's motion and object seconds added to the buckets it covers, each its
    share of the segment's length (within the range)."""
    start, end, width = float(seg["start"]), float(seg["end"]), f.width
    length = max(end - start, 1e-9)
    t = max(start, f.after)
    while t < min(end, f.before):
        b = int(t // width * width)
        share = (min(end, b + width, f.before) - t) / length
        slot = buckets.setdefault(b, [b, 0.0, 0.0, 0])
        slot[1] += (seg["motion_s"] or 0.0) * share
        slot[2] += (seg["objects_s"] or 0.0) * share
        t = b + width


def events_per_bucket(cameras: int, width: int) -> str:
    """Each camera's events in each bucket, counted bucket by bucket in the index on
    (camera, time): a count of a range of it costs little, where grouping a day's events
    sorts every one of them. Bound: first bucket, end, the cameras, the range again."""
    return (f"WITH RECURSIVE b(t) AS (SELECT ? UNION ALL SELECT t + {int(width)} FROM b WHERE t + {int(width)} < ?),"
            f" c(camera) AS (VALUES {', '.join(['(?)'] * cameras)})"
            " SELECT c.camera, b.t, (SELECT COUNT(*) FROM events AS e WHERE e.camera = c.camera AND e.time >= b.t"
            f" AND e.time < b.t + {int(width)} AND e.time >= ? AND e.time < ?) FROM c, b")


def segments_read(cameras: Collection[str], starts: dict[str, float], before: float) -> Where:
    """Each camera's segments from its own earliest start (the one running into the range):
    a camera whose last segment began a month ago reads none of the others' month."""
    w = Where()
    for camera in cameras:
        w.add("(camera = ? AND start >= ? AND start < ?)", camera, starts[camera], before)
    return Where([f"({' OR '.join(w.conditions)})"], w.params)


def known_cameras_sql(table: str) -> str:
    """The cameras of a table in a few index seeks, one per camera (a loose index scan)."""
    return (f"WITH RECURSIVE c(name) AS (SELECT MIN(camera) FROM {table} UNION ALL"
            f" SELECT (SELECT MIN(camera) FROM {table} WHERE camera > c.name) FROM c WHERE c.name IS NOT NULL)"
            " SELECT name FROM c WHERE name IS NOT NULL")


def unmatched(given: tuple[str, ...], missing: list[str]) -> list[str]:
    """Of the `missing` values, those that cannot match: a value with commas is also taken
    whole (`filters.values`), so it is refused only through its parts, and the parts of one
    found whole (a line named `kerb, east`) are no values of their own."""
    wholes = [v for v in given if "," in v and v not in missing]
    parts = {p.strip() for whole in wholes for p in whole.split(",")}
    return [v for v in missing if "," not in v and v not in parts]


class Store(Connections):
    """A store read from any number of threads (`Connections` lends each query its own)."""

    def tracks(self, f: Filters) -> Page:
        w = track_where(f, self.dialect)
        rows = self.fetch(f"SELECT {', '.join(TRACK_COLUMNS)} FROM tracks{w.sql}"
                          " ORDER BY first_seen DESC, id DESC LIMIT ?", [*w.params, f.limit + 1])
        return _page("tracks", TRACK_COLUMNS, rows, f.limit, "first_seen")

    def events(self, f: Filters) -> Page:
        w = event_where(f)
        rows = self.fetch(f"SELECT {', '.join(EVENT_COLUMNS)} FROM events{w.sql}"
                          " ORDER BY time DESC, id DESC LIMIT ?", [*w.params, f.limit + 1])
        return _page("events", EVENT_COLUMNS, rows, f.limit, "time")

    def counts(self, f: Filters) -> list[dict]:
        """Series of `f.group`'s values, each its (bucket start, sum) points in time order;
        buckets with nothing counted are left out."""
        table, column = ("counts_hour", "hour") if f.bucket != "minute" and self.has_table("counts_hour") \
            else ("counts", "minute")
        longer = "a longer bucket, " if f.bucket == "minute" else ""
        read = counts_read(f, column)
        self._readable(f"{table}{read.sql}", read.params, "counts", f"{longer}fewer cameras or a shorter range")
        w = counts_where(f, column)
        keys = ", ".join([*f.group, "b"])
        rows = self._capped(f"SELECT {', '.join(f.group) + ', ' if f.group else ''}{minute_bucket(column, f.width)}"
                            f" AS b, SUM(n) FROM {table}{w.sql} GROUP BY {keys} ORDER BY {keys}", w.params,
                            "counts", "a longer bucket or fewer groups")
        return series(f.group, rows)

    def _readable(self, source: str, params: list, kind: str, advice: str) -> None:
        """`TooMuch` when a query would read more than `MAX_READ` rows of `source`, known
        from counting them by the index, before reading: grouping or sorting them would
        take seconds of the cameras' CPU only to be refused for its answer or its time."""
        if self.count_at_most(source, params, MAX_READ) > MAX_READ:
            raise TooMuch(f"{kind}: the query would read more than {MAX_READ} rows of {source.split()[0]}, the "
                          f"store's limit for one query: ask for {advice}")

    def _capped(self, statement: str, params: list, kind: str, advice: str) -> list[tuple]:
        """The rows of a statement that ends before its LIMIT, at most `MAX_ROWS` of them:
        more would be held in memory whole and built into the answer while the cameras
        wait for the interpreter, so the query is refused instead."""
        rows = self.fetch(f"{statement} LIMIT ?", [*params, MAX_ROWS + 1])
        if len(rows) > MAX_ROWS:
            raise TooMuch(f"{kind}: the answer would hold more than {MAX_ROWS} rows, the store's limit for one "
                          f"query: ask for a shorter range, {advice}")
        return rows

    def segments(self, f: Filters) -> Page:
        """Recording segments that overlap the range, oldest first: those starting in it
        and each camera's one running into it (a camera's segments follow each other)."""
        w = Where()
        w.any_of("camera", f.cameras)
        earliest = None
        if f.after is not None:
            w.add('"end" > ?', f.after)
            earliest = self._earliest_start(f.cameras or self.cameras(), f.after)
        w.page("start", earliest, f.before, f.cursor, newest_first=False)
        rows = self.fetch(f"SELECT {', '.join(SEGMENT_COLUMNS)} FROM segments{w.sql} ORDER BY start, id LIMIT ?",
                          [*w.params, f.limit + 1])
        return _page("segments", SEGMENT_COLUMNS, rows, f.limit, "start")

    def _earliest_start(self, cameras: Collection[str], after: float) -> float:
        starts = [after]
        for camera in cameras:
            row = self.fetch("SELECT start FROM segments WHERE camera = ? AND start < ? ORDER BY start DESC LIMIT 1",
                             [camera, after])
            starts += [row[0][0]] if row else []
        return min(starts)

    def activity(self, f: Filters) -> dict[str, list[list]]:
        """Per camera, its buckets with anything in them: [start, motion seconds, object
        seconds, events], in time order."""
        cams = f.cameras or tuple(self.cameras())
        buckets: dict[str, dict[int, list]] = {c: {} for c in cams}
        if not cams:
            return {}
        advice = "a longer bucket or fewer cameras"
        seen = Where()
        seen.any_of("camera", cams)
        seen.add("time >= ? AND time < ?", f.after, f.before)
        self._readable(f"events{seen.sql}", seen.params, "activity", "fewer cameras or a shorter range")
        w = segments_read(cams, {c: self._earliest_start([c], f.after) for c in cams}, f.before)
        w.add('"end" > ?', f.after)
        for row in self._capped(f"SELECT {', '.join(SEGMENT_COLUMNS)} FROM segments{w.sql}", w.params, "activity",
                                advice):
            seg = _decoded(SEGMENT_COLUMNS, row)
            spread(buckets[seg["camera"]], seg, f)
        for camera, b, n in self._capped(events_per_bucket(len(cams), f.width),
                                         [f.after // f.width * f.width, f.before, *cams, f.after, f.before],
                                         "activity", advice):
            if n:
                buckets[camera].setdefault(int(b), [int(b), 0.0, 0.0, 0])[3] += int(n)
        return {c: [[b, round(m, 3), round(o, 3), n] for b, m, o, n in sorted(slots.values())]
                for c, slots in buckets.items() if slots}

    def cameras(self) -> list[str]:
        """Every camera the store holds anything of."""
        found: set[str] = set()
        for table in CAMERA_TABLES:
            found.update(r[0] for r in self.fetch(known_cameras_sql(table), []))
        return sorted(found)

    def check_known(self, f: Filters, known: Known = Known()) -> None:
        """BadParameter for a value that cannot match: a camera, class, zone or line that
        neither the run names (`known`) nor a row of the store holds (SQL in a value, a
        name mistyped)."""
        if f.cameras:
            cameras = known.cameras | set(self.cameras())
            unknown = [c for c in f.cameras if c not in cameras]
            if unknown:
                raise BadParameter(f"camera: no such camera in the store: {clip(unknown[0])}")
        for field, (name, table, column, kind) in NAMES.items():
            named = getattr(known, field)
            given = [v for v in getattr(f, field) if v not in named]
            missing = self._absent(f"SELECT DISTINCT {column} FROM {table} WHERE {column} IN", given) if given else []
            if missing:
                rollup = "counts_hour" if self.has_table("counts_hour") else "counts"
                counted = (f"SELECT DISTINCT name FROM {rollup} WHERE kind = '{kind}' AND name IN" if kind else
                           f"SELECT DISTINCT class FROM {rollup} WHERE class IN")
                missing = self._absent(counted, missing)
            missing = unmatched(getattr(f, field), missing)
            if missing:
                raise BadParameter(f"{name}: no such {name} in the store: {clip(missing[0])}")

    def _absent(self, select: str, values: list[str]) -> list[str]:
        """Those of `values` the statement (`... IN`, its values to follow) does not give."""
        found = {r[0] for r in self.fetch(f"{select} ({marks(len(values))})", values)}
        return [v for v in values if v not in found]

    def query(self, kind: str, f: Filters) -> Any:
        """The `kind` query (a `filters.ACCEPTED` key) by name, for the API and the CLI."""
        return {"tracks": self.tracks, "events": self.events, "counts": self.counts, "segments": self.segments,
                "activity": self.activity}[kind](f)


def body(kind: str, f: Filters, answer: Any) -> dict:
    """A query's answer as the HTTP API and `pipeline query --json` give it."""
    if isinstance(answer, Page):
        return {kind: answer.rows, "next": answer.next}
    spans = {"bucket": f.bucket, "after": f.after, "before": f.before}
    return {**spans, "series": answer} if kind == "counts" else {**spans, "cameras": answer}
