"""The live video socket: `GET /api/live/<camera>?stream=sub|main` (a WebSocket; the
token as for every request) sends the camera's live stream (`live.stream.LiveStream`):
a text `init` (codec, MIME type, sizes, fps, how far behind live to play), the fMP4
init segment and fragments as binary messages, and each analysed frame's record
(`frame`, at its picture's media time `t`); `gap` when the camera's stream restarted,
`delay` when the delay to play behind live changed, `unavailable` (then the socket
closes) when the camera's packets cannot be streamed: the page shows stills and why.

The camera's thread queues each viewer's messages without waiting (`live.subscriber`:
bounded, a viewer behind skips to the next keyframe); the socket's coroutine sends them,
so a slow viewer only ever delays itself. The client sends nothing: closing ends it.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Callable

from aiohttp import WSMsgType, web

from pipeline.live.hub import STREAMS
from pipeline.live.stream import LiveStream, text
from pipeline.live.subscriber import CONTROL, RECORD, Subscriber

HEARTBEAT_S = 20.0  # a viewer that vanished without closing is found and let go
HubOf = Callable[[str, str], LiveStream | None]


def unavailable(why: str) -> str:
    return text({"type": "unavailable", "why": why})


async def _send(ws: web.WebSocketResponse, sub: Subscriber) -> bool:
    """Send what waits; False once the stream said it cannot be watched any more."""
    for kind, payload in sub.take():
        if kind in (CONTROL, RECORD):
            await ws.send_str(payload)  # type: ignore[arg-type]
            if kind == CONTROL and '"type":"unavailable"' in payload:  # type: ignore[operator]
                return False
        else:
            await ws.send_bytes(payload)  # type: ignore[arg-type]
    return True


async def _reader(ws: web.WebSocketResponse) -> None:
    """Reads until the viewer closes (what it sends is not used)."""
    async for message in ws:
        if message.type == WSMsgType.ERROR:
            return


async def _serve(ws: web.WebSocketResponse, stream: LiveStream) -> None:
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    sub = Subscriber(lambda: loop.call_soon_threadsafe(wake.set))
    why = await loop.run_in_executor(None, stream.subscribe, sub)  # a new viewer's GOP is muxed off the loop
    if why is not None:
        await ws.send_str(unavailable(why))
        return
    reader = asyncio.ensure_future(_reader(ws))
    reader.add_done_callback(lambda _: wake.set())  # the viewer left: the loop below ends
    try:
        while True:
            await wake.wait()
            wake.clear()
            if reader.done() or not await _send(ws, sub):
                return
    except (ConnectionError, RuntimeError):  # the viewer went away mid-send
        return
    finally:
        reader.cancel()
        stream.unsubscribe(sub)


def add_routes(app: web.Application, hub_of: HubOf) -> None:
    """`hub_of(camera, stream)`: the camera's live stream ("sub" or "main"; None: it has
    none). The server's admission (`web.admission`) checked the upgrade's token, as every
    request's, before the route."""

    async def live(request: web.Request) -> web.StreamResponse:
        kind = request.query.get("stream", "sub")
        if kind not in STREAMS:
            raise web.HTTPBadRequest(text=f"stream must be one of {', '.join(STREAMS)}")
        ws = web.WebSocketResponse(heartbeat=HEARTBEAT_S, compress=False)  # fMP4 does not deflate: no CPU spent on it
        await ws.prepare(request)
        stream = hub_of(request.match_info["camera"], kind)
        try:
            if stream is None:
                await ws.send_str(unavailable("the pipeline does not stream this camera's video"))
            else:
                await _serve(ws, stream)
        finally:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.close()
        return ws

    app.router.add_get("/api/live/{camera}", live)
