"""`pipeline query tracks|events|counts|segments|activity`: the store read from a
terminal, with the HTTP API's parameters as options (`--class car --zone lawn --after
2026-12-03T14:00`), as a table or (`--json`) the API's JSON. The store is `--store`'s
file or URL, or the one `--config`'s `outputs.store` names. A page that is not the last
ends with the `--cursor` that gives the next one.

A class, zone or line may be asked for when the store holds it or, with `--config`, the
config names it (`filters.ConfigNames`: a zone nobody entered yet answers empty); with
`--store` there is no config, and only the store's names are known.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_INPUT, DONE, PipelineError
from pipeline.redact import redact
from pipeline.store.filters import ACCEPTED, BadParameter, ConfigNames, Known, TooMuch, parse
from pipeline.store.queries import Page, Store, body

OPTIONS = ("camera", "class", "zone", "line", "direction", "label", "event", "after", "before", "limit", "cursor",
           "bucket", "group")


def store_location(args: argparse.Namespace) -> tuple[str, Known]:
    """`--store`, or `--config`'s `outputs.store` with the names the config gives;
    PipelineError with one line."""
    if bool(args.store) == bool(args.config):
        raise PipelineError("query: give --store PATH_OR_URL or --config (the run's config, for outputs.store)")
    if args.store:
        return args.store, Known()
    from pipeline.config import ConfigError, load_yaml, read_config
    from pipeline.store.connections import location_of

    try:
        config, _ = read_config(load_yaml(args.config), Path(args.config).resolve().parent)
    except ConfigError as e:
        raise PipelineError(e.problems[0]) from None
    location = location_of(config.outputs)
    if location is None:
        raise PipelineError(f"{args.config}: outputs.store is off: this run keeps no store")
    return location, ConfigNames(config)()


def params_of(kind: str, args: argparse.Namespace) -> dict[str, list[str]]:
    """The options given, as the HTTP API's query parameters; one the query does not take
    is refused (`--label` for counts) with the queries it belongs to."""
    params = {}
    for name in OPTIONS:
        given = getattr(args, name, None)
        if given is None:
            continue
        if name not in ACCEPTED[kind]:
            takers = ", ".join(k for k in ACCEPTED if name in ACCEPTED[k])
            raise BadParameter(f"{name}: not an option of query {kind} (only of {takers})")
        params[name] = [str(v) for v in given] if isinstance(given, list) else [str(given)]
    return params


def when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _names(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return "-" if value is None else str(value)


def rows_of(kind: str, answer: Any) -> list[tuple]:
    """A header and a row per answer's row, as text."""
    if kind == "tracks":
        return [("first seen (UTC)", "s", "camera", "track", "class", "score", "zones", "lines", "labels", "id")] + [
            (when(r["first_seen"]), f"{r['last_seen'] - r['first_seen']:.1f}", r["camera"], str(r["track"]),
             _names(r["class"]), "-" if r["best_score"] is None else f"{r['best_score']:.2f}", _names(r["zones"]),
             _names(r["lines"]), _names(r["labels"]), str(r["id"])) for r in answer.rows]
    if kind == "events":
        return [("time (UTC)", "camera", "event", "class", "track", "line", "zone", "direction", "id")] + [
            (when(r["time"]), r["camera"], r["event"], _names(r["class"]), _names(r["track"]), _names(r["line"]),
             _names(r["zone"]), _names(r["direction"]), str(r["id"])) for r in answer.rows]
    if kind == "segments":
        return [("start (UTC)", "end (UTC)", "camera", "MB", "motion s", "objects s", "path")] + [
            (when(r["start"]), when(r["end"]), r["camera"], f"{(r['bytes'] or 0) / 1e6:.1f}",
             f"{r['motion_s'] or 0:.0f}", f"{r['objects_s'] or 0:.0f}", r["path"]) for r in answer.rows]
    if kind == "counts":
        keys = [k for k in ("camera", "kind", "name", "class", "direction") if answer and k in answer[0]]
        points = sorted((t, tuple(s[k] for k in keys), n) for s in answer for t, n in s["points"])
        return [("bucket (UTC)", *keys, "n")] + [(when(t), *group, str(n)) for t, group, n in points]
    return [("bucket (UTC)", "camera", "motion s", "objects s", "events")] + sorted(
        (when(b[0]), camera, f"{b[1]:.0f}", f"{b[2]:.0f}", str(b[3])) for camera, bs in answer.items() for b in bs)


def table(rows: list[tuple]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def command(args: argparse.Namespace) -> int:
    """Print the answer; exit 0, or 2 with one `error:` line (a bad option, a query past
    the store's limits, no store)."""
    kind = args.kind
    try:
        location, known = store_location(args)
        store = Store.open(location)
        try:
            filters = parse(kind, params_of(kind, args))
            store.check_known(filters, known)
            answer = store.query(kind, filters)
        finally:
            store.close()
    except BadParameter as e:  # a limit of the store's is no option: named as it is
        print(f"error: {'' if isinstance(e, TooMuch) else '--'}{redact(str(e))}", file=sys.stderr)
        return BAD_INPUT
    except PipelineError as e:
        for line in e.problems:
            print(f"error: {redact(line)}", file=sys.stderr)
        return e.exit_status
    if args.json:
        print(json.dumps(body(kind, filters, answer), indent=2))
        return DONE
    rows = rows_of(kind, answer)
    print(table(rows) if len(rows) > 1 else "nothing matches")
    if isinstance(answer, Page) and answer.next:
        print(f"more: --cursor {answer.next}")
    return DONE


def add_query_parser(sub) -> None:
    """`pipeline query KIND [options]`: the options are the HTTP API's parameters."""
    query = sub.add_parser("query", help="the store's tracks, events, counts, segments or activity, filtered")
    query.add_argument("kind", choices=list(ACCEPTED), help="what to list")
    query.add_argument("--store", help="the store: a SQLite file or a postgresql:// URL")
    query.add_argument("--config", help="or the run's config: the store its outputs.store names")
    for name, what in (("camera", "camera ids"), ("class", "classes"), ("zone", "zones"), ("line", "lines"),
                       ("direction", "in, out, enter, exit"), ("label", "classifier labels (tracks)"),
                       ("event", "cross, enter, exit, stationary, moving, state (events)"),
                       ("group", "counts: series by camera, kind, name, class, direction")):
        query.add_argument(f"--{name}", action="append", metavar="A[,B]", help=f"{what}; repeat or separate by commas")
    query.add_argument("--after", metavar="TIME", help="from TIME (ISO 8601, UTC unless zoned, or epoch seconds)")
    query.add_argument("--before", metavar="TIME", help="until TIME (excluded)")
    query.add_argument("--limit", help="rows per page (1..1000, default 100; segments up to 10000)")
    query.add_argument("--cursor", help="the next page: the cursor the previous one ended with")
    query.add_argument("--bucket", help="counts and activity: minute, hour (default) or day")
    query.add_argument("--json", action="store_true", help="the HTTP API's JSON instead of a table")
    query.set_defaults(func=command)
