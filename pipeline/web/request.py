"""What the routes need of each other, as protocols: a request being answered (the
handler) and the web server it reaches through `request.app`. The route modules
(`camera_api`, `evidence`, `recordings`), the handler and its admission name these, never each other's
classes, so the web floor imports in one direction: server -> handler -> routes -> these."""
from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from email.message import Message
from typing import BinaryIO, Callable, Collection, Protocol

from prometheus_client import CollectorRegistry

from pipeline.config.outputs import WebConfig
from pipeline.control import CameraControl
from pipeline.sinks.preview import Picture, Preview
from pipeline.store.queries import Store


class Recordings(Protocol):
    """The cameras' recording files (`web.recordings.RecordingFiles`)."""

    root: str
    export_max_s: float

    def file(self, path: str) -> str | None: ...

    def segments(self, camera: str) -> list[dict]: ...

    def boxes(self, recording: str, start: float = ..., end: float = ...) -> list[dict] | None: ...


class App(Protocol):
    """The web server as its requests see it (`web.server.WebServer`)."""

    IDLE_TIMEOUT_S: float
    HEAD_TIMEOUT_S: float
    STILL_WAIT_S: float
    config: WebConfig
    preview: Preview
    cameras: Callable[[], Collection[str]]
    events: Callable[[int, int], list[dict]] | None
    evidence_dir: str | None
    recordings: Recordings | None
    store: Store | None
    control: CameraControl | None
    still_lease_s: float
    closing: threading.Event
    registry: CollectorRegistry

    def api_snapshot(self) -> dict: ...

    def watching(self, camera: str) -> AbstractContextManager[None]: ...

    def seen(self, camera: str, picture: Picture) -> None: ...


class Request(Protocol):
    """A request being answered (`web.handler.Handler`)."""

    headers: Message
    rfile: BinaryIO
    wfile: BinaryIO

    @property
    def app(self) -> App: ...

    def send(self, status: int, body: bytes, content_type: str = ..., headers: dict[str, str] | None = None) -> None:
        ...

    def send_head(self, status: int, content_type: str, length: int | None,
                  headers: dict[str, str] | None = None) -> None: ...
