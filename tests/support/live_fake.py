"""A stand-in for the pipeline's web server as the live page sees it, for the page's own
tests: it serves the page and its scripts from the package, a camera list, stills, and
the live WebSocket of docs' protocol (`/api/live/<camera>`): an `init` message, the fMP4
init segment, then one fragment per picture at the clip's rate, each followed by that
picture's frame record (`t`: its media time, read from the fragment's `tfdt`). The
fragments are the clip's packets remuxed by PyAV (copied, never re-encoded), as the
server's own stream makes them. `mode` makes it answer otherwise: `hevc` (an init naming a
codec the browser cannot play), `unavailable`, `refused` (no WebSocket: 404), `main-hevc`
(the main stream unavailable for its codec, the sub-stream playing).
"""
from __future__ import annotations

import asyncio
import io
import json
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import av
import cv2
import numpy as np
from aiohttp import WSMsgType, web

WEB = Path(__file__).resolve().parents[2] / "pipeline" / "web"
HEVC_MAIN = "its video is hevc: the live page plays H.264 only"
PAGES = {"/": "page.html", "/review": "review.html", "/static/playback.js": "playback.js",
         "/static/overlay.js": "overlay.js"}


@dataclass
class Fragment:
    t: float        # its first picture's media time (s)
    data: bytes     # moof + mdat
    key: bool       # it starts at a keyframe


def boxes_of(data: bytes) -> list[tuple[bytes, bytes]]:
    """The top-level MP4 boxes of `data`: (type, whole box)."""
    out, at = [], 0
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        out.append((kind, data[at:at + size]))
        at += size
    return out


def _field(box: bytes, kind: bytes, fmt64: str, fmt32: str, skip: int) -> int:
    """A version-dependent integer `skip` bytes into the full box `kind` found in `box`."""
    at = box.index(kind) + 4
    version = box[at]
    return struct.unpack_from(fmt64 if version == 1 else fmt32, box, at + 4 + (skip * 2 if version == 1 else skip))[0]


def fragment(clip: str) -> tuple[bytes, list[Fragment], str]:
    """The clip's video remuxed to fMP4: its init segment, its fragments and its codec (RFC 6381)."""
    sink = io.BytesIO()
    with av.open(clip) as src, av.open(sink, "w", format="mp4",
                                       options={"movflags": "empty_moov+default_base_moof+frag_every_frame"}) as out:
        stream = src.streams.video[0]
        copy = out.add_stream_from_template(stream)
        keys = []
        for packet in src.demux(stream):
            if packet.dts is None:
                continue
            keys.append(packet.is_keyframe)
            packet.stream = copy
            out.mux(packet)
    boxes = boxes_of(sink.getvalue())
    init = b"".join(b for kind, b in boxes if kind in (b"ftyp", b"moov"))
    moov = next(b for kind, b in boxes if kind == b"moov")
    scale = _field(moov, b"mdhd", ">I", ">I", 8)  # after creation and modification times
    pairs = [(a, b) for (ka, a), (kb, b) in zip(boxes, boxes[1:]) if ka == b"moof" and kb == b"mdat"]
    frags = [Fragment(_field(moof, b"tfdt", ">Q", ">I", 0) / scale, moof + mdat, key)
             for (moof, mdat), key in zip(pairs, keys)]
    avcc = moov[moov.index(b"avcC") + 4:]
    return init, frags, "avc1." + avcc[1:4].hex().upper()


@dataclass
class FakeLive:
    """The server's state: the clip's `init` and `frags`, each picture's box (`truth`), the
    fragments a socket sends before it closes (`close_after`, then the next socket goes on
    from there), and what it served (`sockets` opened)."""
    init: bytes
    frags: list[Fragment]
    codec: str
    truth: list[tuple[int, int, int, int] | None]
    size: tuple[int, int]
    fps: float
    mode: str = "video"
    close_after: int | None = None
    box_scale: int = 1  # the records' boxes in pixels this many times the video's (a sub-stream's, in its main stream's)
    sockets: int = 0
    streams: list[str] = field(default_factory=list)  # the stream each socket asked for
    sent: int = 0
    still: bytes = field(default=b"")

    def record(self, i: int) -> dict:
        box = self.truth[i]
        k = self.box_scale
        detections = [] if box is None else [{"box": [v * k for v in box], "score": 0.9, "class_id": 0,
                                              "class": "person", "predicted": False, "track": 1}]
        return {"type": "frame", "t": self.frags[i].t, "seq": i, "time": None, "detections": detections,
                "boxes": [self.size[0] * k, self.size[1] * k]}


def cameras(camera: str) -> dict:
    """What `/api/cameras` answers for one streaming camera (the parts the page reads)."""
    recent = {"window_s": 10, "fps": 15.0, "latency": {"p99_ms": 40}}
    return {"live_view": {"fps": 5, "annotated": True, "motion": []}, "recent": recent, "processed": 1,
            "cpu_percent": 1, "cameras": {camera: {"state": "streaming", "recent": recent, "dropped": {},
                                                   "reconnects": 0, "attempts": 0, "downtime_s": 0.0,
                                                   "recording": False, "detector": {}, "counts": {}}}}


async def live_socket(fake: FakeLive, request: web.Request) -> web.StreamResponse:
    if fake.mode == "refused":
        raise web.HTTPNotFound()
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    fake.sockets += 1
    fake.streams.append(request.query.get("stream", "sub"))
    if fake.mode == "unavailable" or (fake.mode == "main-hevc" and fake.streams[-1] == "main"):
        why = "the camera is decoded only" if fake.mode == "unavailable" else HEVC_MAIN
        await ws.send_str(json.dumps({"type": "unavailable", "why": why}))
        await ws.receive()
        return ws
    codec = "hvc1.1.6.L93.B0" if fake.mode == "hevc" else fake.codec
    await ws.send_str(json.dumps({"type": "init", "camera": request.match_info["camera"], "stream": "sub",
                                  "codec": codec, "mime": f'video/mp4; codecs="{codec}"', "width": fake.size[0],
                                  "height": fake.size[1], "boxes": list(fake.size), "fps": fake.fps,
                                  "delay_s": 0.5}))
    await ws.send_bytes(fake.init)
    start, sent = fake.sent, 0
    while start > 0 and not fake.frags[start].key:  # a viewer starts at a keyframe
        start -= 1
    for i in range(start, len(fake.frags)):
        if fake.close_after is not None and fake.sockets == 1 and sent == fake.close_after:
            await ws.close()
            return ws
        await ws.send_bytes(fake.frags[i].data)
        await ws.send_str(json.dumps(fake.record(i)))
        fake.sent, sent = i + 1, sent + 1
        await asyncio.sleep(1 / fake.fps)
    async for msg in ws:  # the clip is over: the socket stays open, as a camera's does
        if msg.type == WSMsgType.CLOSE:
            break
    return ws


def app(fake: FakeLive, camera: str) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        name = PAGES[request.path]
        kind = "text/html" if name.endswith(".html") else "text/javascript"
        return web.Response(body=(WEB / name).read_bytes(), content_type=kind, charset="utf-8")

    async def still(request: web.Request) -> web.Response:
        return web.Response(body=fake.still, content_type="image/jpeg", headers={"X-Seq": "1"})

    routes = web.Application()
    for path in PAGES:
        routes.router.add_get(path, page)
    async def listed(request: web.Request) -> web.Response:
        return web.json_response(cameras(camera))

    async def no_events(request: web.Request) -> web.Response:
        return web.json_response({"error": "no events"}, status=404)

    async def socket(request: web.Request) -> web.StreamResponse:
        return await live_socket(fake, request)

    routes.router.add_get("/api/cameras", listed)
    routes.router.add_get("/api/events", no_events)
    routes.router.add_get("/frame/{name}", still)
    routes.router.add_get("/api/live/{camera}", socket)
    return routes


def serve(fake: FakeLive, camera: str) -> tuple[str, Callable[[], None]]:
    """The fake served on 127.0.0.1 from a thread of its own: its base URL and its stop."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app(fake, camera))
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    return f"http://127.0.0.1:{port}", stop


def jpeg(size: tuple[int, int]) -> bytes:
    return cv2.imencode(".jpg", np.full((size[1], size[0], 3), 128, np.uint8))[1].tobytes()
