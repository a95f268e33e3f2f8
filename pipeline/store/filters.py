"""The store's query parameters, read and checked in one place for the HTTP API and the
command line: each arrives as text (a parameter may repeat, or hold values separated by
commas), and each problem is one line naming the parameter (`BadParameter`), so a
hostile or mistyped request is refused before any SQL is built.

Times are ISO 8601 (with or without a zone: UTC assumed) or UNIX epoch seconds; `after`
is inclusive, `before` exclusive. A page is at most `MAX_LIMIT` rows; counts span at most
`MAX_RANGE_S`, minute buckets at most `MAX_MINUTE_RANGE_S` (activity: `ACTIVITY_RANGE_S`). The cursor is opaque to
clients: the last row's time and id, base64 of JSON, checked as strictly as any other
parameter (a time a row can hold, an id a row can have: it only ever reaches SQL as bound
numbers). An answer holds at most `MAX_ROWS` rows, counts and activity read at most
`MAX_READ` (`TooMuch`, as a bad parameter).

A camera, class, zone or line is known (may be asked for) when a row of the store holds it
or the run's config names it (`Known`, `ConfigNames`): "cars this week" of a store that
saw none yet, or a zone configured this morning, answers empty, where a name neither
knows (mistyped, SQL) cannot match and is refused.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import re
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, Sequence

from pipeline.config import AnalyticsSpec, Config, DetectSpec, StageSpec
from pipeline.config.sources import CAMERA_ID

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
MAX_SEGMENTS = 10000  # a day of 10 s segments of one camera fits in one answer
MAX_RANGE_S = 366 * 86400
MAX_MINUTE_RANGE_S = 7 * 86400
COUNTS_RANGE_S = {"minute": MAX_MINUTE_RANGE_S, "hour": MAX_RANGE_S, "day": MAX_RANGE_S}
# activity counts each camera's buckets one by one: fewer of them
ACTIVITY_RANGE_S = {"minute": 2 * 86400, "hour": 62 * 86400, "day": MAX_RANGE_S}
MAX_VALUES = 64  # values of one parameter
MAX_TEXT = 200  # characters of one value
MAX_CURSOR = 256  # characters of a cursor (those given are about 60)
MAX_TIME = 253402300800.0  # 10000-01-01: later is no time a camera saw
MAX_ROWS = 100_000  # rows one query may read into its answer: a week of minute counts of 10 series
# rows counts or activity may read from the store, counted before reading (cheap: the
# index): grouping them costs about 1 s of CPU per 200,000; a day of minute counts of 128
# series (16 cameras of 8 lines) is 184,320
MAX_READ = 200_000
BUCKETS = {"minute": 60, "hour": 3600, "day": 86400}
DEFAULT_SPAN = {"minute": 3600, "hour": 86400, "day": 30 * 86400}  # a range's length when only one end is given
EVENT_KINDS = ("cross", "enter", "exit", "stationary", "moving", "state")
DIRECTIONS = ("in", "out", "enter", "exit")
GROUPS = ("camera", "kind", "name", "class", "direction")
DEFAULT_GROUP = ("camera", "kind", "name")
ACCEPTED = {  # the parameters of each query; `token` is the web token's, never a filter
    "tracks": {"camera", "class", "zone", "line", "direction", "label", "after", "before", "limit", "cursor"},
    "events": {"camera", "class", "zone", "line", "direction", "event", "after", "before", "limit", "cursor"},
    "counts": {"camera", "class", "zone", "line", "direction", "after", "before", "bucket", "group"},
    "segments": {"camera", "after", "before", "limit", "cursor"},
    "activity": {"camera", "after", "before", "bucket"},
}
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


class BadParameter(ValueError):
    """One line naming the parameter and what is wrong with it."""


class TooMuch(BadParameter):
    """A query past one of the store's limits for one query (its rows, its time): one line
    naming the limit and how to ask within it. A client's to narrow, as a bad parameter is."""


@dataclass(frozen=True)
class Cursor:
    """Where the last page ended: its last row's time and id (keyset paging)."""

    kind: str
    time: float
    id: int

    def encode(self) -> str:
        raw = json.dumps([self.kind, self.time, self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass(frozen=True)
class Filters:
    """A query's checked parameters; an empty tuple filters nothing."""

    cameras: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    directions: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    after: float | None = None
    before: float | None = None
    limit: int = DEFAULT_LIMIT
    cursor: Cursor | None = None
    bucket: str = "hour"
    group: tuple[str, ...] = DEFAULT_GROUP

    @property
    def width(self) -> int:
        """The bucket's length in seconds."""
        return BUCKETS[self.bucket]


@dataclass(frozen=True)
class Known:
    """Names a query may ask for though no row of the store holds them yet: the run's
    cameras, its detectors' classes, its lines and zones (none: the store alone decides)."""

    cameras: frozenset[str] = frozenset()
    classes: frozenset[str] = frozenset()
    zones: frozenset[str] = frozenset()
    lines: frozenset[str] = frozenset()


def detector_classes(config: Config) -> frozenset[str]:
    """The classes the run's detectors can see: their models' labels, read with the config
    (a labels file or the ONNX file's names, once). A detector without labels names its
    classes by number; those are known only once the store holds them."""
    return frozenset(label for spec in config.graph if isinstance(spec, DetectSpec) and spec.model in config.models
                     for label in config.models[spec.model].labels)


def analytics_of(graph: Iterable[StageSpec]) -> list[AnalyticsSpec]:
    return [spec for spec in graph if isinstance(spec, AnalyticsSpec)]


class ConfigNames:
    """What a run's config names, as `Known`: the cameras and classes gathered once (they
    change only with a restart), the lines and zones of every camera from the analytics
    specs `live` gives (a reload renames them), gathered again only when those change."""

    def __init__(self, config: Config, live: Callable[[], Sequence[AnalyticsSpec]] | None = None):
        self.base = Known(frozenset(s.id for s in config.sources), detector_classes(config))
        self.live = live or (lambda: analytics_of(config.graph))
        self._last: tuple[tuple[AnalyticsSpec, ...], Known] = ((), self.base)  # swapped whole: threads share it

    def __call__(self) -> Known:
        specs = tuple(self.live())
        seen, known = self._last
        if len(specs) == len(seen) and all(a is b for a, b in zip(specs, seen)):
            return known
        cams = [cam for spec in specs for cam in spec.cameras.values()]
        known = replace(self.base, zones=frozenset(z.name for cam in cams for z in cam.zones),
                        lines=frozenset(line.name for cam in cams for line in cam.lines))
        self._last = (specs, known)
        return known


def clip(text: str, n: int = 40) -> str:
    """A client's value quoted for an error line: printable, short."""
    shown = "".join(c if c.isprintable() else "?" for c in text[:n])
    return repr(shown + ("..." if len(text) > n else ""))


def parse_time(name: str, text: str) -> float:
    """ISO 8601 (a naive one is UTC) or epoch seconds, as epoch seconds."""
    text = text.strip()
    if _NUMBER.fullmatch(text):
        value = float(text)
    else:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise BadParameter(f"{name}: not a time: {clip(text)} (ISO 8601, e.g. 2026-12-03T14:00:00Z, "
                               "or epoch seconds)") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        value = moment.timestamp()
    if not math.isfinite(value) or not 0 <= value < MAX_TIME:
        raise BadParameter(f"{name}: {clip(text)} is outside 1970-01-01 .. 9999-12-31")
    return value


def decode_cursor(text: str, kind: str) -> Cursor:
    """A cursor this API gave for `kind`, or BadParameter (one far longer than any it gives
    is refused unread: deeply nested JSON would exhaust the parser's recursion)."""
    try:
        if len(text) > MAX_CURSOR:
            raise ValueError("too long")
        raw = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        raise BadParameter("cursor: not a cursor this API gave (pass `next` from the previous page)") from None
    if (not isinstance(raw, list) or len(raw) != 3 or raw[0] != kind or isinstance(raw[1], bool)
            or not isinstance(raw[1], (int, float)) or not 0 <= raw[1] < MAX_TIME
            or isinstance(raw[2], bool) or not isinstance(raw[2], int) or not 0 <= raw[2] < 2**63):
        raise BadParameter(f"cursor: not a cursor of {kind} (pass `next` from the previous page of the same query)")
    return Cursor(kind, float(raw[1]), raw[2])


def values(params: Mapping[str, Sequence[str]], name: str, names: bool = True) -> tuple[str, ...]:
    """A parameter's values: repeated, or separated by commas; empty ones dropped. With
    `names` (names from the config), a value with commas is also taken whole: a line or
    zone may be named with a comma."""
    out = [v.strip() for given in params.get(name, ())
           for v in ([given] if names and "," in given else []) + given.split(",") if v.strip()]
    if len(out) > MAX_VALUES:
        raise BadParameter(f"{name}: at most {MAX_VALUES} values, got {len(out)}")
    for v in out:
        if len(v) > MAX_TEXT or not v.isprintable():
            raise BadParameter(f"{name}: {clip(v)} is not a name (printable, at most {MAX_TEXT} characters)")
    return tuple(dict.fromkeys(out))


def one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    given = [v for v in params.get(name, ()) if v.strip()]
    if len(given) > 1:
        raise BadParameter(f"{name}: given {len(given)} times; give it once")
    return given[0] if given else None


def chosen(params: Mapping[str, Sequence[str]], name: str, allowed: Sequence[str]) -> tuple[str, ...]:
    """Values that must each be one of `allowed`."""
    out = values(params, name, names=False)
    for v in out:
        if v not in allowed:
            raise BadParameter(f"{name}: {clip(v)} is not one of {', '.join(allowed)}")
    return out


def parse_limit(params: Mapping[str, Sequence[str]], most: int = MAX_LIMIT) -> int:
    text = one(params, "limit")
    if text is None:
        return min(DEFAULT_LIMIT, most)
    if not re.fullmatch(r"\+?\d{1,9}", text.strip()):
        raise BadParameter(f"limit: {clip(text)} is not a whole number from 1 to {most}")
    limit = int(text)
    if not 1 <= limit <= most:
        raise BadParameter(f"limit: {limit} is outside 1..{most}")
    return limit


def parse_range(params: Mapping[str, Sequence[str]]) -> tuple[float | None, float | None]:
    after, before = (parse_time(n, t) if t is not None else None for n, t in
                     (("after", one(params, "after")), ("before", one(params, "before"))))
    if after is not None and before is not None and before <= after:
        raise BadParameter(f"before: must be later than after ({before:.0f} <= {after:.0f})")
    return after, before


def bounded_range(filters: Filters, now: float | None = None, limits: Mapping[str, int] | None = None) -> Filters:
    """Both ends of a counts or activity range (a missing one `DEFAULT_SPAN` from the
    other, `before` now by default), checked against the limits of its bucket."""
    span = DEFAULT_SPAN[filters.bucket]
    before = filters.before if filters.before is not None else (
        filters.after + span if filters.after is not None else (now if now is not None else time.time()))
    after = filters.after if filters.after is not None else max(0.0, before - span)
    most = (limits or COUNTS_RANGE_S)[filters.bucket]
    if before - after > most:
        raise BadParameter(f"after: the range is {(before - after) / 86400:.1f} days; {filters.bucket} buckets "
                           f"span at most {most // 86400} days")
    return replace(filters, after=after, before=before)


def check_known(params: Mapping[str, Sequence[str]], kind: str) -> None:
    unknown = sorted(set(params) - ACCEPTED[kind] - {"token"})
    if unknown:
        known = ", ".join(sorted(ACCEPTED[kind]))
        raise BadParameter(f"{clip(unknown[0])}: not a parameter of {kind} (known: {known})")


def cameras(params: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    out = values(params, "camera", names=False)  # a camera id holds no comma
    for c in out:
        if not CAMERA_ID.fullmatch(c):
            raise BadParameter(f"camera: {clip(c)} is not a camera id")
    return out


def parse(kind: str, params: Mapping[str, Sequence[str]], now: float | None = None) -> Filters:
    """The checked parameters of a `kind` query (tracks, events, counts, segments,
    activity); BadParameter names the first one that is wrong."""
    if kind not in ACCEPTED:
        raise BadParameter(f"query: {clip(kind)} is not one of {', '.join(ACCEPTED)}")
    check_known(params, kind)
    after, before = parse_range(params)
    given = {
        "cameras": cameras(params), "classes": values(params, "class"), "zones": values(params, "zone"),
        "lines": values(params, "line"), "directions": chosen(params, "direction", DIRECTIONS),
        "labels": values(params, "label"), "events": chosen(params, "event", EVENT_KINDS),
        "after": after, "before": before,
    }
    if "limit" in ACCEPTED[kind]:
        given["limit"] = parse_limit(params, MAX_SEGMENTS if kind == "segments" else MAX_LIMIT)
    cursor = one(params, "cursor")
    if cursor is not None and "cursor" in ACCEPTED[kind]:
        given["cursor"] = decode_cursor(cursor.strip(), kind)
    if "bucket" in ACCEPTED[kind]:
        bucket = one(params, "bucket") or "hour"
        if bucket not in BUCKETS:
            raise BadParameter(f"bucket: {clip(bucket)} is not one of {', '.join(BUCKETS)}")
        given["bucket"] = bucket
    if "group" in ACCEPTED[kind]:
        given["group"] = chosen(params, "group", GROUPS) if "group" in params else DEFAULT_GROUP
    filters = Filters(**given)
    if kind in ("counts", "activity"):
        return bounded_range(filters, now, COUNTS_RANGE_S if kind == "counts" else ACTIVITY_RANGE_S)
    return filters
