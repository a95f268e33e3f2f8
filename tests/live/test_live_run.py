"""A real run: a realtime file camera (a B-frame H.264 clip playing as a live camera)
watched over the live socket for a few seconds: the init, the fMP4 of its own packets,
and each analysed frame's record at the media time of the picture it was made from; a
camera recording its main stream and analysed on its sub-stream, watched full size (its
main stream): each record at its main-stream picture, its boxes in the main stream's
pixels, played far enough behind live for its records (read ahead of the analysis)."""
from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from conftest import detector_model
from live_clips import pictures

RECORDS = 15  # frame records read (3 s at the analysed 5 fps)


@pytest.fixture
def running(tmp_path, write_config):
    """A pipeline started from a config dict, stopped after the test."""
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    started = []

    def start(cfg: dict) -> Pipeline:
        cfg["outputs"]["dir"] = str(tmp_path / "out")
        started.append(Pipeline(load_config(write_config(cfg))))
        started[-1].start()
        return started[-1]

    yield start
    for p in started:
        p.stop(abort=True)
        p.close(timeout=10)


async def watch(port: int, camera: str = "bikes", stream: str = "sub") -> list:
    """The live socket of the run's own web server, read until RECORDS frame records came."""
    got: list = []
    async with aiohttp.ClientSession() as session:
        for _ in range(120):  # the camera's first keyframe may come after the socket
            async with session.ws_connect(f"http://127.0.0.1:{port}/api/live/{camera}?stream={stream}") as ws:
                got = []
                while sum(1 for k, m in got if k == "text" and m["type"] == "frame") < RECORDS:
                    m = await asyncio.wait_for(ws.receive(), 60)
                    if m.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                        break
                    got.append(("text", json.loads(m.data)) if m.type == aiohttp.WSMsgType.TEXT else ("binary", m.data))
            if got and got[0][1]["type"] == "init":
                return got
            await asyncio.sleep(0.5)
    return got


def test_a_realtime_file_camera_streams_its_packets_and_each_record_at_its_picture(model_path, sample_path,
                                                                                  running):
    p = running({"sources": [{"id": "bikes", "uri": sample_path("bikes.mp4"), "realtime": True, "loop": True,
                              "max_fps": 5}],
                 "models": {"det": detector_model(model_path, score_threshold=0.2)},
                 "graph": [{"detect": {"model": "det"}}, "track", {"analytics": {"cameras": {"bikes": {
                     "lines": [{"name": "kerb", "points": [[0, 200], [639, 200]]}],
                     "zones": [{"name": "road", "polygon": [[0, 150], [639, 150], [639, 271], [0, 271]]}]}}}}],
                 "outputs": {"web": {"port": 0}}})
    got = asyncio.run(watch(p.side.web.port))
    init = got[0][1]
    assert init["type"] == "init" and (init["width"], init["height"], init["fps"]) == (640, 272, 25.0)
    assert init["boxes"] == [640, 272] and init["codec"].startswith("avc1.")
    shown = {t for _, t in pictures(b"".join(m for k, m in got if k == "binary"))}
    records = [m for k, m in got if k == "text" and m["type"] == "frame"]
    assert len(records) == RECORDS and all("detections" in r for r in records)
    seen = [r["t"] for r in records if min(shown) <= r["t"] <= max(shown)]  # (the last picture waits for its next)
    assert seen and all(t in shown for t in seen)  # each record at one of the pictures sent, exactly
    assert any(r["detections"] for r in records)
    # what the annotated video draws beside the boxes: each line and zone as it stands, in the boxes' pixels
    assert all([ln["name"] for ln in r["lines"]] == ["kerb"] and r["lines"][0]["points"] == [[0, 200], [639, 200]]
               and [z["name"] for z in r["zones"]] == ["road"] and len(r["zones"][0]["polygon"]) == 4
               for r in records)


def test_a_main_stream_watched_full_size_gets_each_record_at_its_picture_and_a_delay_covering_them(
        tmp_path, model_path, sample_path, running):
    from pipeline.bench import camera_clips as clips

    small = clips.Encoding(size=(640, 360), fps=10, gop_s=1.0)
    main = clips.camera_clip(tmp_path / "main.mp4", small, source=sample_path("vtest.mp4"), seconds=6)
    sub = clips.sub_stream(main, tmp_path / "sub.mp4", (320, 180))
    p = running({"sources": [{"id": "gate", "uri": main, "detect_uri": sub, "realtime": True, "loop": True,
                              "max_fps": 5}],
                 "models": {"det": detector_model(model_path, score_threshold=0.2)},
                 "graph": [{"detect": {"model": "det"}}, "track"],
                 "outputs": {"web": {"port": 0}, "record": {"enabled": True}}})
    got = asyncio.run(watch(p.side.web.port, "gate", "main"))
    init = got[0][1]
    assert init["type"] == "init" and init["stream"] == "main" and (init["width"], init["height"]) == (640, 360)
    shown, lag = set(), []
    for kind, m in got:  # in the order sent: how far behind the newest picture sent each record came
        if kind == "binary":
            shown |= {t for _, t in pictures(b"".join(x for k, x in got[:got.index((kind, m)) + 1] if k == "binary"))}
        elif m["type"] == "frame" and shown:
            lag.append(max(shown) - m["t"])
    records = [m for k, m in got if k == "text" and m["type"] == "frame"]
    seen = [r["t"] for r in records if min(shown) <= r["t"] <= max(shown)]
    assert seen and all(t in shown for t in seen)  # the main stream's own pictures, exactly
    assert all(r["boxes"] == [640, 360] for r in records) and any(r["detections"] for r in records)
    delays = [m["delay_s"] for k, m in got if k == "text" and m["type"] in ("init", "delay")]
    assert lag and delays[-1] >= sorted(lag)[len(lag) // 2], (delays, lag)  # the page plays behind its records
