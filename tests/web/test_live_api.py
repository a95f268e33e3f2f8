"""The live video socket on a real aiohttp server on 127.0.0.1, fed by a real connection
reading a B-frame clip: the init message, the init segment and fragments that decode to
the camera's pictures, each frame's record at its picture's media time, `gap` at a
restart, `unavailable` for a camera with no packets, and the token on the page's server."""
from __future__ import annotations

import asyncio
import json
from fractions import Fraction

import aiohttp
import pytest
from aiohttp import web

from pipeline.config.outputs import WebConfig
from pipeline.frames import Frame
from pipeline.live.hub import LiveHub
from pipeline.metrics.snapshot import Snapshot
from pipeline.sinks.preview import Preview
from pipeline.web.live_api import add_routes
from pipeline.web.server import WebServer
from live_clips import numbered_clip, pictures, play

TOKEN = "s3cret"


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> str:
    return numbered_clip(str(tmp_path_factory.mktemp("live_api") / "b.mp4"))


async def serving(hub: LiveHub) -> tuple[web.AppRunner, str]:
    app = web.Application()
    add_routes(app, hub.find)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def receive(ws, until) -> list:
    """Messages as (kind, payload) until `until(messages)` holds."""
    got: list = []
    while not until(got):
        m = await asyncio.wait_for(ws.receive(), 30)
        if m.type == aiohttp.WSMsgType.TEXT:
            got.append(("text", json.loads(m.data)))
        elif m.type == aiohttp.WSMsgType.BINARY:
            got.append(("binary", m.data))
        else:
            got.append(("closed", m.type))
            break
    return got


def frame_at(t: float, seq: int) -> Frame:
    f = Frame(camera="cam", seq=seq, pts=seq, time_base=Fraction(1, 10), image=None, t_capture=0.0,
              rate=Fraction(10))
    f.live_time = t
    return f


def test_a_viewer_gets_the_stream_and_each_frames_record_at_its_media_time(clip):
    hub = LiveHub(lambda camera: 0.5)
    stream = hub.stream("cam", "sub")
    shown = play(stream, clip, until=12)  # a camera streaming: its newest GOP starts at picture 10

    async def scenario():
        runner, url = await serving(hub)
        loop = asyncio.get_running_loop()
        try:
            async with aiohttp.ClientSession() as session, \
                    session.ws_connect(f"{url}/api/live/cam?stream=sub") as ws:
                first = await receive(ws, lambda got: len(got) >= 3)
                t = shown[10][1]
                record = {"camera": "cam", "seq": 10, "detections": [{"box": [1, 2, 3, 4], "track": 7}]}
                await loop.run_in_executor(None, hub.frame, frame_at(t, 10), record, (640, 480))
                later = await receive(ws, lambda got: any(k == "text" and p["type"] == "frame" for k, p in got))
                rest = await loop.run_in_executor(None, play, stream, clip)  # the camera's next connection
                after = await receive(ws, lambda got: any(k == "text" and p["type"] == "gap" for k, p in got))
                return first + later + after, rest
        finally:
            await runner.cleanup()

    messages, _ = asyncio.run(scenario())
    init = messages[0][1]
    assert init["type"] == "init" and init["stream"] == "sub" and (init["width"], init["height"]) == (64, 48)
    assert init["mime"].startswith('video/mp4; codecs="avc1.') and init["delay_s"] > 0.5
    frames = [p for k, p in messages if k == "text" and p["type"] == "frame"]
    assert frames[0]["t"] == shown[10][1] and frames[0]["detections"][0]["track"] == 7
    assert frames[0]["boxes"] == [640, 480]
    video = b"".join(p for k, p in messages if k == "binary")
    got = pictures(video)
    assert got[0] == shown[10]  # from the newest keyframe, at the media time its frame's record says


def test_a_camera_with_no_packets_yet_is_unavailable_and_an_unknown_one_too():
    hub = LiveHub()
    hub.stream("idle", "sub")

    async def scenario():
        runner, url = await serving(hub)
        try:
            out = []
            async with aiohttp.ClientSession() as session:
                for camera in ("idle", "nobody"):
                    async with session.ws_connect(f"{url}/api/live/{camera}") as ws:
                        out.append(await receive(ws, lambda got: len(got) >= 2))
            return out
        finally:
            await runner.cleanup()

    idle, unknown = asyncio.run(scenario())
    assert idle[0] == ("text", {"type": "unavailable", "why": "no video from the camera yet"})
    assert unknown[0][1]["type"] == "unavailable"
    assert idle[1][0] == unknown[1][0] == "closed"


def test_the_socket_needs_the_token_on_the_pages_server(clip):
    """The live route on the page's server (`routes=`): its upgrade is a request like any
    other, the server's admission asks it for the token."""
    hub = LiveHub()
    play(hub.stream("cam", "sub"), clip, until=3)
    preview = Preview()
    server = WebServer(WebConfig(port=0, token=TOKEN), Snapshot, preview, cameras=lambda: ["cam"],
                       routes=lambda app: add_routes(app, hub.find))
    server.start()
    url = f"http://127.0.0.1:{server.port}"

    async def scenario():
        async with aiohttp.ClientSession() as session:
            statuses = []
            for suffix in ("", "?token=wrong"):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await session.ws_connect(f"{url}/api/live/cam{suffix}")
                statuses.append(refused.value.status)
            async with session.ws_connect(f"{url}/api/live/cam", headers={"Cookie": f"pipeline_token={TOKEN}"}) as ws:
                statuses.append((await receive(ws, lambda got: len(got) >= 1))[0][1]["type"])
            return statuses

    try:
        assert asyncio.run(scenario()) == [401, 401, "init"]
    finally:
        server.close()
        preview.close()
