"""Cameras over HTTP (`outputs.web.control`): `POST /api/cameras` with one source mapping
(JSON, or YAML like a `sources[]` entry) adds a camera, `DELETE /api/cameras/<id>`
removes one; both through `CameraControl`, the code path `pipeline cluster add|remove`
takes too.

Every answer is redacted: a mistake reads like `validate`'s lines (`body.uri: file not
found: ...`, one per line, 400), an id that runs is 409, one that does not 404.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Mapping

import yaml

from pipeline.config import ConfigError
from pipeline.control import CameraControl
from pipeline.errors import CameraInUse, UnknownCamera, one_line
from pipeline.redact import redact
from pipeline.web.request import Ask, Reply, as_json

log = logging.getLogger("pipeline.web")

MAX_BODY = 64 * 1024  # a camera's mapping is a few hundred bytes
DRAIN = 1 << 20  # of a body too large, this much is read and dropped before the connection closes
PREFIX = "/api/cameras"
WHERE = "body"  # the YAML path of the body's mapping in the problems
MAX_DEPTH = 32  # lists and mappings in one another; a camera's mapping is 3 deep
TOO_DEEP = f"nested too deeply (at most {MAX_DEPTH} levels)"


# the path exists (GET lists the cameras): changing the cameras is what is refused
OFF = Reply(403, b"adding and removing cameras over HTTP is off (outputs.web.control)\n")


def text(status: int, *lines: str) -> Reply:
    return Reply(status, "".join(redact(line) + "\n" for line in lines).encode())


class _Refused(Exception):
    """A body refused before it is built; the message is the answer's line."""


def read_mapping(body: bytes, content_type: str) -> Any:
    """The body's data: JSON when it says so, else YAML (which reads JSON too). A body that
    is neither, or nests deeper than `MAX_DEPTH`, raises ValueError with one line."""
    try:
        text_ = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{WHERE}: not UTF-8 text") from None
    try:
        if content_type.split(";")[0].strip().lower() == "application/json":
            data = json.loads(text_)
            if _depth(data) > MAX_DEPTH:
                raise RecursionError
            return data
        return yaml.load(text_, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader)
    except _Refused as e:
        raise ValueError(str(e)) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{WHERE}: invalid JSON: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1} column {mark.column + 1}:" if mark else ""
        raise ValueError(f"{WHERE}:{at} invalid YAML: {getattr(e, 'problem', None) or e}") from None
    except RecursionError:
        raise ValueError(f"{WHERE}: {TOO_DEEP}") from None
    except ValueError as e:  # a value the parser cannot hold (an integer of 60,000 digits)
        raise ValueError(f"{WHERE}: {str(e).split(';')[0]}") from None


def _depth(data: Any) -> int:
    """How deeply lists and mappings nest in `data` (a scalar: 0), without recursing."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, (list, dict)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                todo.extend((v, level + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


class _BoundedLoader(yaml.SafeLoader):
    """YAML without aliases and at most `MAX_DEPTH` deep, both refused as the parser
    reaches them, in the one pass that builds the data: a camera's mapping needs neither,
    a few hundred bytes of nested aliases stand for billions of values, and PyYAML's cost
    grows with the square of the nesting (60 KB of brackets held a thread for minutes)."""

    depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise _Refused(f"{WHERE}: {self._at()}: YAML aliases (*name) are not accepted here")
        return super().compose_node(parent, index)

    def compose_sequence_node(self, anchor):
        return self._nested(super().compose_sequence_node, anchor)

    def compose_mapping_node(self, anchor):
        return self._nested(super().compose_mapping_node, anchor)

    def _nested(self, compose, anchor):
        if self.depth >= MAX_DEPTH:
            raise _Refused(f"{WHERE}: {self._at()}: {TOO_DEEP}")
        self.depth += 1
        try:
            return compose(anchor)
        finally:
            self.depth -= 1

    def _at(self) -> str:
        mark = self.peek_event().start_mark
        return f"line {mark.line + 1} column {mark.column + 1}"


def add(control: CameraControl, body: bytes, content_type: str) -> Reply:
    try:
        source = control.add(read_mapping(body, content_type), where=WHERE)
    except ConfigError as e:
        return text(400, *e.problems)
    except ValueError as e:
        return text(400, str(e))
    except CameraInUse as e:
        return text(409, str(e))
    except Exception as e:  # the pipeline could not start it: said, not a dropped connection
        log.warning("adding a camera over HTTP failed: %s", one_line(e))
        return text(500, f"the camera could not be added: {one_line(e)}")
    log.info("camera %s added over HTTP", source.id)
    return as_json({"added": source.id}, 201)


def remove(control: CameraControl, camera: str) -> Reply:
    try:
        control.remove(camera)
    except UnknownCamera as e:
        return text(404, str(e))
    except Exception as e:  # the run could not remove it now (a run of hosts: it ended, or the run is stopping)
        log.warning("removing camera %s over HTTP failed: %s", camera, one_line(e))
        return text(503, f"the camera could not be removed: {one_line(e)}")
    log.info("camera %s removed over HTTP", camera)
    return as_json({"removing": camera}, 202)


def body_problem(headers: Mapping[str, str]) -> tuple[Reply, int] | None:
    """Why a body is refused before it is read (411, 413), with how much of it to read and
    drop first (so that the client reads the answer, not a reset); None: read it."""
    length = headers.get("Content-Length", "")
    if not length.isdigit() or "Transfer-Encoding" in headers:
        return Reply(411, b"a Content-Length is needed\n"), 0
    if int(length) > MAX_BODY:
        return Reply(413, f"a camera's mapping is at most {MAX_BODY} bytes\n".encode()), min(int(length), DRAIN)
    return None


def post(ask: Ask) -> Reply:
    """`POST /api/cameras` (its body read, `body_problem` permitting)."""
    control = ask.app.control
    if control is None:
        return OFF
    return add(control, ask.body, ask.headers.get("Content-Type", ""))


def delete(ask: Ask) -> Reply:
    """`DELETE /api/cameras/<id>` (`ask.path`: the id)."""
    if not ask.path:
        return Reply(404, b"not found\n")
    control = ask.app.control
    return OFF if control is None else remove(control, ask.path)
