"""The live view's routes on aiohttp: the page, the API, the metrics, a camera's stills or
its MJPEG stream, its motion for the tuning view, the events and their evidence files,
the recordings and their boxes, and (with `outputs.web.control`) cameras added and
removed and the config reloaded.

Each route module is a function `Ask -> Reply` (`web.request`) run in the server's thread
pool, never on the loop; its `Reply` becomes the answer here: a body, or a file aiohttp
sends in the byte range asked for. Stills and the stream wait for pictures on the loop
(`WebServer.next_picture`), holding no thread. Every answer says `Cache-Control: no-store`
and `X-Content-Type-Options: nosniff`.
"""
from __future__ import annotations

import asyncio
import re
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from aiohttp import web
from prometheus_client import generate_latest

from pipeline.redact import redact_data
from pipeline.sinks.preview import Picture
from pipeline.web import camera_api, evidence, export_api, pages, recordings, reload_api, store_api, tuning
from pipeline.web.request import App, Ask, Reply, as_json

MAX_VIEWER = 32  # characters of a page's name for itself (`?viewer=`) that are kept
ONE_RANGE = re.compile(r"bytes=(\d+-\d*|-\d+)")  # what aiohttp reads; any other Range is ignored (RFC 9110)
Route = Callable[[Ask], Reply]


class Viewing(App, Protocol):
    """What the async routes need of the server beyond `App`."""

    STILL_WAIT_S: float
    IDLE_TIMEOUT_S: float
    still_lease_s: float
    closing: threading.Event

    def run(self, work: Callable[..., Any], *args: Any) -> Awaitable[Any]: ...

    def next_picture(self, camera: str, after: int, timeout: float) -> Awaitable[Picture | None]: ...

    def seen(self, camera: str, picture: Picture) -> None: ...


SERVER = web.AppKey("server", Viewing)


def _int(values: list[str] | None, default: int) -> int:
    try:
        return int(values[0]) if values else default
    except ValueError:
        return default


def cameras(ask: Ask) -> Reply:
    return as_json(redact_data(ask.app.api_snapshot()))


def recent_events(ask: Ask) -> Reply:
    """The newest events after id `after`, newest first, with their evidence paths."""
    if ask.app.events is None:
        return Reply(404, b"this run keeps no events for the page\n")
    limit, after = _int(ask.query.get("limit"), 50), _int(ask.query.get("after"), 0)
    return as_json({"events": redact_data(ask.app.events(max(1, min(limit, 200)), after))})


def metrics(ask: Ask) -> Reply:
    return Reply(200, generate_latest(ask.app.registry), "text/plain; version=0.0.4")


GET: dict[str, Route] = {"/api/cameras": cameras, "/api/events": recent_events, "/api/boxes": recordings.serve_boxes,
                         export_api.PATH: export_api.serve, "/metrics": metrics,
                         **dict.fromkeys(pages.FILES, pages.serve)}
GET_UNDER: dict[str, Route] = {"/api/motion/": tuning.serve, "/evidence/": evidence.serve,
                               "/recordings/": recordings.serve_file, "/api/recordings/": recordings.serve_segments}


def add_routes(app: web.Application) -> None:
    for path, route in GET.items():
        app.router.add_get(path, answering(route), allow_head=False)
    for prefix, route in GET_UNDER.items():
        app.router.add_get(prefix + "{rest:.*}", answering(route, prefix), allow_head=False)
    app.router.add_get(store_api.PREFIX + "{rest:.*}", store_queries(store_api.Places()), allow_head=False)
    app.router.add_get("/frame/{rest:.*}", still, allow_head=False)
    app.router.add_get("/stream/{rest:.*}", stream, allow_head=False)
    app.router.add_post(reload_api.PATH, answering(reload_api.post))
    app.router.add_post(camera_api.PREFIX, posting)
    app.router.add_delete(camera_api.PREFIX + "/{rest:.*}", answering(camera_api.delete, camera_api.PREFIX + "/"))
    app.on_response_prepare.append(_stamp)


async def _stamp(_request: web.Request, response: web.StreamResponse) -> None:
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")


@web.middleware
async def not_found(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
    """A path no route serves (with this method) is answered in the API's words."""
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        return await respond(request, Reply(404, b"not found\n"))


def ask_of(request: web.Request, prefix: str = "", body: bytes = b"") -> Ask:
    """The request as its route reads it: the path after `prefix` decoded from the raw path
    (aiohttp's decoded one would turn `%2F` into a separator before the route's checks)."""
    raw = request.rel_url.raw_path
    path = urllib.parse.unquote(raw[len(prefix):]) if prefix else raw
    query = urllib.parse.parse_qs(request.rel_url.raw_query_string)
    return Ask(request.app[SERVER], path, query, request.headers, body)


def answering(route: Route, prefix: str = "") -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def answer(request: web.Request) -> web.StreamResponse:
        reply = await request.app[SERVER].run(route, ask_of(request, prefix))
        return await respond(request, reply)
    return answer


def store_queries(places: store_api.Places) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The store's queries: each waits for a place on the loop, then runs in the pool."""
    async def answer(request: web.Request) -> web.StreamResponse:
        if not await places.take():
            return await respond(request, store_api.busy())
        try:
            reply = await request.app[SERVER].run(store_api.serve, ask_of(request, store_api.PREFIX))
        finally:
            places.give()
        return await respond(request, reply)
    return answer


async def posting(request: web.Request) -> web.StreamResponse:
    """`POST /api/cameras`: its body read here, on the loop, within `camera_api`'s bounds."""
    problem = camera_api.body_problem(request.headers)
    if problem is not None:
        answer, drop = problem
        while drop > 0 and (chunk := await request.content.read(drop)):
            drop -= len(chunk)
        return await respond(request, answer)
    body = await request.read()
    return await respond(request, await request.app[SERVER].run(camera_api.post, ask_of(request, body=body)))


async def respond(request: web.Request, reply: Reply) -> web.StreamResponse:
    """The route's reply as aiohttp's answer (a change of the server's state closes the
    connection after it, so a body left unread is never taken for the next request)."""
    if reply.file is None:
        response: web.StreamResponse = web.Response(status=reply.status, body=reply.body,
                                                    headers={"Content-Type": reply.content_type, **reply.headers})
    else:
        response = await send_file(request, reply)
    if request.method != "GET":
        response.force_close()
    return response


class PlayableFile(web.FileResponse):
    """A file aiohttp sends (byte ranges, If-Range, 206 and 416 its own), as if it ended
    at `size`: an MP4 being written, up to its last whole fragment."""

    def __init__(self, path: str, size: int | None, **kwargs: Any):
        super().__init__(path, **kwargs)
        self.size = size

    def _make_response(self, request: web.BaseRequest, accept_encoding: str) -> Any:
        result, fobj, stat, encoding = super()._make_response(request, accept_encoding)
        if self.size is not None:
            stat = Cut(min(self.size, stat.st_size), stat.st_mtime, stat.st_mtime_ns, stat.st_mode)
        return result, fobj, stat, encoding

    async def prepare(self, request: web.BaseRequest) -> Any:
        """Once: `send_file` sends it with the request it tidied, aiohttp asks again with its own."""
        return None if self.prepared else await super().prepare(request)


@dataclass(frozen=True)
class Cut:
    """The file's `os.stat_result` as `PlayableFile` has aiohttp see it."""

    st_size: int
    st_mtime: float
    st_mtime_ns: int
    st_mode: int


async def send_file(request: web.Request, reply: Reply) -> web.StreamResponse:
    """`reply.file`, sent now: a Range that is not one valid byte range is ignored (the whole
    file, as RFC 9110 allows; aiohttp would answer 416), and no precompressed sibling
    (`.gz`) of the file is ever sent in its place."""
    headers = request.headers.copy()
    headers.popall("Accept-Encoding", None)
    if not ONE_RANGE.fullmatch(headers.get("Range", "")) or _backwards(headers.get("Range", "")):
        headers.popall("Range", None)
    response = PlayableFile(reply.file or "", reply.size, headers={"Content-Type": reply.content_type, **reply.headers})
    try:
        await response.prepare(request.clone(headers=headers))
    finally:
        if reply.after is not None:
            await request.app[SERVER].run(reply.after)
    return response


def _backwards(header: str) -> bool:
    first, _, last = header.removeprefix("bytes=").partition("-")
    return bool(first and last) and int(last) < int(first)


def named(request: web.Request, prefix: str, suffix: str = "") -> str | None:
    """The camera a `/frame/` or `/stream/` path names, if it is one of the run's."""
    raw = request.rel_url.raw_path
    if not raw.endswith(suffix):
        return None
    camera = urllib.parse.unquote(raw[len(prefix):len(raw) - len(suffix)])
    return camera if camera in request.app[SERVER].cameras() else None


NO_CAMERA = Reply(404, b"no such camera\n")


async def still(request: web.Request) -> web.StreamResponse:
    """The camera's newest picture (204 when it is still the one numbered `?after=`).
    Asking keeps the camera watched for a while, so a viewer that asks at the live rate
    gets fresh pictures; the first ask after nobody watched waits for one. `?viewer=`:
    the page asking (its tiles count as viewers, `Preview.viewers`)."""
    if not request.rel_url.raw_path.endswith(".jpg"):
        return await respond(request, Reply(404, b"not found\n"))
    camera = named(request, "/frame/", ".jpg")
    if camera is None:
        return await respond(request, NO_CAMERA)
    server, query = request.app[SERVER], urllib.parse.parse_qs(request.rel_url.raw_query_string)
    current = server.preview.watch_for(camera, server.still_lease_s, (query.get("viewer") or [""])[0][:MAX_VIEWER])
    picture = server.preview.latest(camera, timeout=0)
    if not current:
        picture = await server.next_picture(camera, picture.seq if picture else -1, server.STILL_WAIT_S) or picture
    if picture is None:
        return await respond(request, Reply(503, b"no picture yet\n", headers={"Retry-After": "1"}))
    if picture.seq == _int(query.get("after"), -1):
        return web.Response(status=204)
    server.seen(camera, picture)
    return web.Response(body=picture.jpeg, content_type="image/jpeg",
                        headers={"X-Capture-Time": f"{picture.captured:.6f}", "X-Seq": str(picture.seq)})


async def stream(request: web.Request) -> web.StreamResponse:
    """MJPEG: the newest picture whenever there is a new one, until the viewer goes (or
    stops reading for the idle timeout) or the server closes."""
    camera = named(request, "/stream/")
    if camera is None:
        return await respond(request, NO_CAMERA)
    server = request.app[SERVER]
    response = web.StreamResponse(headers={"Content-Type": "multipart/x-mixed-replace; boundary=frame"})
    response.force_close()
    await response.prepare(request)
    server.preview.watch(camera)
    try:
        seq = -1
        while not server.closing.is_set():
            picture = await server.next_picture(camera, seq, 1.0)
            if picture is not None:
                seq = picture.seq
                await asyncio.wait_for(response.write(_part(picture)), server.IDLE_TIMEOUT_S)
                server.seen(camera, picture)
    except (ConnectionError, asyncio.TimeoutError):
        pass  # the viewer went (said once, by its connection) or stopped reading
    finally:
        server.preview.unwatch(camera)
    return response


def _part(picture: Picture) -> bytes:
    head = (f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(picture.jpeg)}\r\n"
            f"X-Capture-Time: {picture.captured:.6f}\r\nX-Seq: {picture.seq}\r\n\r\n").encode()
    return head + picture.jpeg + b"\r\n"
