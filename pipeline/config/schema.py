"""Typed config records and the reader that fills them from YAML.

Every section of the config is a dataclass whose fields carry their default, a one-line
doc and an optional check (`option(...)`). The reader reads a mapping into such a class
by the fields' annotations, and records every problem with its YAML path
(`sources[1].uri: file not found: cams/b.mp4`) instead of raising, so a user fixes a
config in one round. The option tables of docs/reference.md are generated from the same fields
(`pipeline.config.reference`), so defaults and docs cannot drift apart.
"""
from __future__ import annotations

import dataclasses
import os
import reprlib
import stat
import types
import typing
from dataclasses import MISSING, field, fields
from pathlib import Path
from typing import Any, Callable, Literal, Union, get_args, get_origin

import numpy as np

from pipeline.config.limits import POINTS, over
from pipeline.errors import PipelineError
from pipeline.redact import redact, secret_key

Check = Callable[[Any], "str | None"]
ReadHook = Callable[["Reader", Any, str], Any]


class ConfigError(PipelineError):
    """All problems of one config, each 'yaml.path: message'."""

    def __init__(self, problems: list[str]):
        super().__init__(*problems)


class _Invalid:
    """A value that was reported as a problem; the field keeps its default."""

    def __repr__(self) -> str:
        return "INVALID"


INVALID: Any = _Invalid()


def option(default: Any = MISSING, *, doc: str, check: Check | None = None, factory: Callable[[], Any] | None = None,
           read: ReadHook | None = None, shown: str | None = None) -> Any:
    """A config field. `doc` is its line in the option table (docs/reference.md) (`shown` overrides
    how the default is displayed); `check(value)` returns a problem or None; `read`
    replaces reading by annotation (paths, sizes, label files). Without a default the
    field is required."""
    metadata = {"doc": doc, "check": check, "read": read, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def internal(default: Any = None) -> Any:
    """A field filled by the program (a model's name from its key, a stage's YAML path),
    never read from YAML."""
    return field(default=default, metadata={"internal": True}, repr=False, compare=False)


# -- checks ---------------------------------------------------------------------------------
def positive(v: float) -> str | None:
    return None if v > 0 else f"must be > 0, got {v}"


def non_negative(v: float) -> str | None:
    return None if v >= 0 else f"must be >= 0, got {v}"


def within(low: float, high: float) -> Check:
    def check(v: float) -> str | None:
        return None if low <= v <= high else f"must be within {low:g}..{high:g}, got {v}"
    return check


def resolve_path(base_dir: Path, value: str) -> str:
    p = Path(os.path.expanduser(value))
    return str(p if p.is_absolute() else (base_dir / p))


def is_url(uri: str) -> bool:
    return "://" in uri


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def local_path(uri: str) -> str | None:
    """The file on this machine that FFmpeg opens for `uri`: a plain path, or the path of
    a `file://` URL, also inside FFmpeg's wrapping protocols (`cache:file:///x`); None
    for a network URL. FFmpeg takes what follows `file:` as it is (no %-decoding)."""
    if not is_url(uri):
        return uri
    scheme, _, rest = uri.partition("://")
    return "/" + rest.lstrip("/") if scheme.rsplit(":", 1)[-1].lower() == "file" else None


def file_problem(path: str) -> str | None:
    """Why `path` is not a regular file to read (None when it is). A FIFO, a device or a
    socket blocks or never ends: FFmpeg's open of a FIFO without a writer waits in the
    kernel, where no timeout reaches it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "file not found"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return f"not a regular file ({kind})"


# -- the reader -----------------------------------------------------------------------------
_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "true/false", list: "list", dict: "mapping"}
URL_FIELDS = ("uri", "url", "detect_uri")


def secret_field(where: str) -> bool:
    """Whether the field at this YAML path holds a secret (a password, a token, a URL that
    may carry credentials): its problems never show its value."""
    name = where.rsplit(".", 1)[-1].split("[", 1)[0]
    return name in URL_FIELDS or secret_key(name)


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlist = _SHORT.maxdict = 6
_SHORT.maxlevel = 3


def describe_value(value: Any, where: str = "") -> str:
    """A wrong value as a problem shows it: its type and value, or its type alone where
    the field holds a secret (`where`: its YAML path)."""
    if isinstance(value, bool):
        return "a boolean"
    if secret_field(where):
        return _kind(type(value))
    return f"{type(value).__name__} {_SHORT.repr(value)}"  # shortened: a value may be huge (YAML aliases)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Reader:
    """Reads YAML values into typed records, collecting problems with their YAML paths."""

    def __init__(self, base_dir: Path):
        self.base_dir = base_dir
        self.problems: list[str] = []

    def problem(self, path: str, message: str) -> None:
        """Record a problem; a URL in it shows redacted (`rtsp://admin:***@host/...`)."""
        self.problems.append(redact(f"{path}: {message}"))

    def mapping(self, value: Any, path: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(path or "(top level)", f"expected a mapping, got {describe_value(value)}")
            return {}
        return value

    def record(self, cls: type, value: Any, path: str, given: dict[str, Any] | None = None) -> Any:
        """An instance of the dataclass `cls` from a mapping. Fields missing or invalid
        keep their default (required ones become None, the problem recorded); `given`
        fills internal fields. The record's `finish(reader, path)` then checks what
        involves several of its fields."""
        m = self.mapping(value, path)
        readable = readable_fields(cls)
        known = {f.name for f, _ in readable}
        for key in m:
            if key not in known:
                self.problem(_join(path, str(key)), f"unknown key (known: {', '.join(sorted(known))})")
        values: dict[str, Any] = dict(given or {})
        for f, hint in readable:
            where = _join(path, f.name)
            raw = m.get(f.name)
            required = f.default is MISSING and f.default_factory is MISSING
            if raw is None:
                if required:
                    self.problem(where, "required")
                    values[f.name] = None
                continue
            hook = f.metadata.get("read")
            got = hook(self, raw, where) if hook else self.value(hint, raw, where)
            check = f.metadata.get("check")
            if got is not INVALID and got is not None and check is not None:
                message = check(got)
                if message:
                    self.problem(where, message)
                    got = INVALID
            if got is INVALID:
                if required:
                    values[f.name] = None
                continue
            values[f.name] = got
        obj = cls(**values)
        finish = getattr(obj, "finish", None)
        if finish is not None:
            finish(self, path)
        return obj

    def value(self, hint: Any, raw: Any, where: str) -> Any:
        """`raw` read as the annotated type `hint`, or INVALID (with the problem recorded)."""
        origin = get_origin(hint)
        if origin in (Union, types.UnionType):
            options = [a for a in get_args(hint) if a is not type(None)]
            if len(options) == 1:
                return self.value(options[0], raw, where)
            for a in options:
                if _fits(a, raw):
                    return self.value(a, raw, where)
            self.problem(where, f"expected {' or '.join(_kind(a) for a in options)}, got "
                                f"{describe_value(raw, where)}")
            return INVALID
        if origin is Literal:
            choices = get_args(hint)
            if raw in choices and not isinstance(raw, bool):
                return raw
            shown = describe_value(raw, where) if secret_field(where) else repr(raw)
            self.problem(where, f"must be one of {', '.join(map(str, choices))}, got {shown}")
            return INVALID
        if origin is list:
            if not isinstance(raw, list):
                self.problem(where, f"expected a list, got {describe_value(raw, where)}")
                return INVALID
            (item,) = get_args(hint)
            out = [self.value(item, v, f"{where}[{i}]") for i, v in enumerate(raw)]
            return [v for v in out if v is not INVALID]
        if origin is dict:
            if not isinstance(raw, dict):
                self.problem(where, f"expected a mapping, got {describe_value(raw, where)}")
                return INVALID
            _, item = get_args(hint)
            out = {str(k): self.value(item, v, _join(where, str(k))) for k, v in raw.items()}
            return {k: v for k, v in out.items() if v is not INVALID}
        if dataclasses.is_dataclass(hint):
            return self.record(hint, raw, where)
        if hint is Any:
            return raw
        if not _fits(hint, raw):
            self.problem(where, f"expected {_kind(hint)}, got {describe_value(raw, where)}")
            return INVALID
        return float(raw) if hint is float else raw


def _fits(hint: Any, raw: Any) -> bool:
    origin = get_origin(hint) or hint
    if isinstance(raw, bool):
        return origin is bool
    if origin is float:
        return isinstance(raw, (int, float))
    if origin is Literal:
        return raw in get_args(hint)
    if dataclasses.is_dataclass(origin):
        return isinstance(raw, dict)
    return isinstance(origin, type) and isinstance(raw, origin)


def _kind(hint: Any) -> str:
    """A type as problems name it: `an integer`, `a mapping`, `true/false`."""
    origin = get_origin(hint) or hint
    if origin is Literal:
        return "one of " + ", ".join(map(str, get_args(hint)))
    if dataclasses.is_dataclass(origin):
        return "a mapping"
    name = _TYPE_NAMES.get(origin)
    if name is None:
        return getattr(origin, "__name__", str(origin))
    if origin is bool:
        return name
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


# -- hooks shared by several sections -------------------------------------------------------
def read_string_map(r: Reader, raw: Any, where: str) -> dict[str, str] | Any:
    """FFmpeg-style options: scalar values of any YAML type, passed on as strings."""
    if not isinstance(raw, dict):
        r.problem(where, f"expected a mapping, got {describe_value(raw, where)}")
        return INVALID
    bad = [k for k, v in raw.items() if isinstance(v, (list, dict))]
    for k in bad:
        r.problem(_join(where, str(k)), "expected a single value")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items() if k not in bad}


def read_points(count: int | None) -> Any:
    """[x, y] points: exactly `count` of them, or at least 3 (a polygon)."""
    def read(r: Reader, raw: Any, where: str) -> list[tuple[float, float]] | Any:
        try:
            arr = np.asarray(raw, np.float64)
        except (TypeError, ValueError):
            arr = np.zeros((0,))
        ok = arr.ndim == 2 and arr.shape[1] == 2 and np.isfinite(arr).all()
        ok = ok and (len(arr) == count if count is not None else len(arr) >= 3)
        if not ok:
            r.problem(where, f"expected {count or '3 or more'} [x, y] points")
            return INVALID
        if len(arr) > POINTS:
            r.problem(where, over(len(arr), POINTS, "points of a polygon"))
            return INVALID
        if count == 2 and np.allclose(arr[0], arr[1]):
            r.problem(where, "the two points are the same: a line needs a length")
            return INVALID
        return [(float(x), float(y)) for x, y in arr]
    return read


def read_polygons(r: Reader, raw: Any, where: str) -> list[list[tuple[float, float]]] | Any:
    """A list of polygons, each 3 or more [x, y] points."""
    if not isinstance(raw, list):
        r.problem(where, f"expected a list of polygons (lists of [x, y] points), got {describe_value(raw, where)}")
        return INVALID
    polygon = read_points(None)
    read = [polygon(r, item, f"{where}[{i}]") for i, item in enumerate(raw)]
    return [p for p in read if p is not INVALID]


def read_file(r: Reader, raw: Any, where: str) -> str | Any:
    """A path relative to the config file, which must exist."""
    if not isinstance(raw, str):
        r.problem(where, f"expected a file path, got {describe_value(raw, where)}")
        return INVALID
    resolved = resolve_path(r.base_dir, raw)
    why = file_problem(resolved)
    if why is not None:
        r.problem(where, f"{why}: {raw}")
        return INVALID
    return resolved


def read_path(r: Reader, raw: Any, where: str) -> str | Any:
    """A path relative to the config file (it need not exist yet)."""
    if not isinstance(raw, str) or not raw:
        r.problem(where, f"expected a path, got {describe_value(raw, where)}")
        return INVALID
    return resolve_path(r.base_dir, raw)


def shown_default(f: dataclasses.Field) -> str:
    """How a field's default reads in the option tables."""
    if f.metadata.get("shown") is not None:
        return f.metadata["shown"]
    if f.default_factory is not MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            return ""
    elif f.default is MISSING:
        return "required"
    else:
        value = f.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value}`"


def type_name(hint: Any) -> str:
    """A field's type as the option tables show it."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        parts = [type_name(a) for a in get_args(hint) if a is not type(None)]
        return " or ".join(parts)
    if origin is Literal:
        return " \\| ".join(map(str, get_args(hint)))
    if origin is list:
        return f"list of {type_name(get_args(hint)[0])}"
    if origin is dict:
        return "mapping"
    if origin is tuple:
        return "[" + ", ".join(type_name(a) for a in get_args(hint)) + "]"
    if dataclasses.is_dataclass(hint):
        return "mapping"
    return _TYPE_NAMES.get(hint, str(hint))


def readable_fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """The fields read from YAML (not the ones the program fills), with their types."""
    hints = _hints(cls)
    return [(f, hints[f.name]) for f in fields(cls) if f.init and not f.metadata.get("internal")]
