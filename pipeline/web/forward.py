"""A camera's live routes answered by the web server of the process that holds it: a run
over processes (`run --processes`) serves one page on one port (`cluster.front`), while
each camera's pictures, MJPEG, motion view and live video come from the host process
that decodes it (its own web server, on 127.0.0.1 behind a token of the run's own).

The stills, the motion view and the MJPEG stream are relayed as they come (a stream
chunk by chunk, so a viewer sees each picture when the host sends it); a video socket is
relayed message by message, each sent before the next is read, so a slow viewer holds
only its own socket to the host: once the relay's buffers are full (the sockets' own,
some hundreds of kilobytes), the host's queue for it fills and skips to the next
keyframe (`live.subscriber`). Nothing is deflated on the way (fMP4 does not compress). A
camera no host holds is 404, as on one process's server; a host that does not answer is
502 (a socket gets `unavailable`, as for a camera whose video cannot be streamed, and the
page shows stills). The host's URL is made from the camera's id (checked against the
run's cameras), never from the path as sent.
"""
from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from typing import Awaitable, Callable

import aiohttp
import yarl
from aiohttp import WSMsgType, web

from pipeline.live.hub import STREAMS
from pipeline.web.handler import NO_CAMERA, named, respond
from pipeline.web.live_api import HEARTBEAT_S, unavailable

Where = Callable[[str], "str | None"]  # a camera -> the base URL of the server holding it (None: none does)
RELAYED = ("Content-Type", "Retry-After", "X-Capture-Time", "X-Seq")  # what a host's answer says that the viewer needs
CONNECT_S = 5.0  # a host answers its own loopback server in well under this
STREAMING = aiohttp.ClientTimeout(total=None, connect=CONNECT_S, sock_read=None)  # MJPEG: quiet while a camera reconnects


class Forwarder:
    """Relays to the host servers with their token; one client session (made on the
    server's loop at the first request, closed with the server)."""

    def __init__(self, where: Where, token: str, idle_s: float):
        self.where, self.token, self.idle_s = where, token, idle_s
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {self.token}"},
                connector=aiohttp.TCPConnector(limit=0, force_close=False),
                timeout=aiohttp.ClientTimeout(total=None, connect=CONNECT_S, sock_read=self.idle_s))
        return self._session

    async def close(self, _app: web.Application | None = None) -> None:
        if self._session is not None:
            await self._session.close()

    def url(self, camera: str, prefix: str, suffix: str, request: web.Request) -> yarl.URL | None:
        """The host's URL for the camera's route (the viewer's query but its token), or None."""
        base = self.where(camera)
        if base is None:
            return None
        query = [(k, v) for k, v in urllib.parse.parse_qsl(request.rel_url.raw_query_string, keep_blank_values=True)
                 if k != "token"]
        path = prefix + urllib.parse.quote(camera, safe="") + suffix
        return yarl.URL(base + path + ("?" + urllib.parse.urlencode(query) if query else ""), encoded=True)


def _unreachable(e: BaseException) -> web.Response:
    return web.Response(status=502, text=f"the camera's process did not answer: {type(e).__name__}\n")


def relaying(forward: Forwarder, prefix: str, suffix: str = ""
             ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A GET under `prefix` (the camera, then `suffix`) answered by the camera's host."""

    async def relay(request: web.Request) -> web.StreamResponse:
        camera = named(request, prefix, suffix)
        url = forward.url(camera, prefix, suffix, request) if camera is not None else None
        if url is None:
            return await respond(request, NO_CAMERA)
        streaming = {"timeout": STREAMING} if prefix == "/stream/" else {}
        try:
            async with forward.session().get(url, allow_redirects=False, **streaming) as answer:
                headers = {k: answer.headers[k] for k in RELAYED if k in answer.headers}
                if not answer.headers.get("Content-Type", "").startswith("multipart/"):
                    return web.Response(status=answer.status, body=await answer.read(), headers=headers)
                response = web.StreamResponse(status=answer.status, headers=headers)
                response.force_close()
                await response.prepare(request)
                with contextlib.suppress(ConnectionError, asyncio.TimeoutError, aiohttp.ClientError):
                    async for chunk in answer.content.iter_any():
                        await asyncio.wait_for(response.write(chunk), forward.idle_s)
                return response
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            return _unreachable(e)

    return relay


async def _pump(source: aiohttp.ClientWebSocketResponse, viewer: web.WebSocketResponse) -> None:
    """The host's messages to the viewer, each sent before the next is read."""
    async for message in source:
        if message.type == WSMsgType.TEXT:
            await viewer.send_str(message.data)
        elif message.type == WSMsgType.BINARY:
            await viewer.send_bytes(message.data)
        else:
            return


async def _drain(viewer: web.WebSocketResponse) -> None:
    """Reads the viewer until it closes (it sends nothing the stream uses)."""
    async for message in viewer:
        if message.type == WSMsgType.ERROR:
            return


def relaying_video(forward: Forwarder) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """`/api/live/<camera>`: the host's video socket, relayed."""

    async def live(request: web.Request) -> web.StreamResponse:
        if request.query.get("stream", "sub") not in STREAMS:
            raise web.HTTPBadRequest(text=f"stream must be one of {', '.join(STREAMS)}")
        viewer = web.WebSocketResponse(heartbeat=HEARTBEAT_S, compress=False)
        await viewer.prepare(request)
        url = forward.url(request.match_info["camera"], "/api/live/", "", request)
        try:
            if url is None:
                await viewer.send_str(unavailable("no such camera"))
                return viewer
            try:
                source = await forward.session().ws_connect(url, heartbeat=HEARTBEAT_S, max_msg_size=0)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                await viewer.send_str(unavailable(f"the camera's process did not answer ({type(e).__name__})"))
                return viewer
            async with source:
                tasks = [asyncio.ensure_future(_pump(source, viewer)), asyncio.ensure_future(_drain(viewer))]
                try:
                    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
        except (ConnectionError, RuntimeError):
            pass  # the viewer went mid-send
        finally:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await viewer.close()
        return viewer

    return live


def add_routes(app: web.Application, forward: Forwarder) -> None:
    """Registered before the server's own: these answer the camera's live routes."""
    app.router.add_get("/frame/{rest:.*}", relaying(forward, "/frame/", ".jpg"), allow_head=False)
    app.router.add_get("/stream/{rest:.*}", relaying(forward, "/stream/"), allow_head=False)
    app.router.add_get("/api/motion/{rest:.*}", relaying(forward, "/api/motion/"), allow_head=False)
    app.router.add_get("/api/live/{camera}", relaying_video(forward))
    app.on_cleanup.append(forward.close)
