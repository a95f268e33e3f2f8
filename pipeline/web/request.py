"""What a route answers from and with: `Ask` (a request's path, query, headers and body,
as the server's loop read them) and `Reply` (status, body, type and headers, or a file to
send), and `App`, the web server as the routes see it. The route modules (`camera_api`,
`evidence`, `recordings`, ...) are plain functions `Ask -> Reply`, run in the server's
thread pool: they may block (the store, the disk, camera control) and never know the
HTTP library, so the web floor imports in one direction: server -> handler -> routes -> these."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Collection, Mapping, Protocol

from prometheus_client import CollectorRegistry

from pipeline.config.outputs import WebConfig
from pipeline.control import CameraControl
from pipeline.sinks.preview import Preview
from pipeline.store.filters import Known
from pipeline.store.queries import Store

TEXT = "text/plain; charset=utf-8"


class Recordings(Protocol):
    """The cameras' recording files (`web.recordings.RecordingFiles`)."""

    root: str
    export_max_s: float

    def file(self, path: str) -> str | None: ...

    def segments(self, camera: str) -> list[dict]: ...

    def boxes(self, recording: str, start: float = ..., end: float = ...) -> list[dict] | None: ...


class App(Protocol):
    """The web server as its routes see it (`web.server.WebServer`)."""

    config: WebConfig
    preview: Preview
    cameras: Callable[[], Collection[str]]
    events: Callable[[int, int], list[dict]] | None
    evidence_dir: str | None
    recordings: Recordings | None
    store: Store | None
    control: CameraControl | None
    registry: CollectorRegistry

    def api_snapshot(self) -> dict: ...

    def known(self) -> Known: ...


@dataclass(frozen=True)
class Ask:
    """A request as a route reads it. `path`: what follows the route's prefix, percent-
    decoded from the path exactly as sent (no client or library tidied it: the routes'
    own checks refuse `..`), or the whole path for a route without a prefix."""

    app: App
    path: str
    query: Mapping[str, list[str]] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def token(self) -> str:
        return (self.query.get("token") or [""])[0]


@dataclass
class Reply:
    """A route's answer. With `file`, the server sends that file (byte ranges as asked)
    instead of `body`, at most `size` bytes of it where given (an MP4 being written:
    what plays now), and runs `after` (in the pool) once it is sent or the client went."""

    status: int
    body: bytes = b""
    content_type: str = TEXT
    headers: dict[str, str] = field(default_factory=dict)
    file: str | None = None
    size: int | None = None
    after: Callable[[], None] | None = None


def as_json(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(data).encode(), "application/json", headers or {})
