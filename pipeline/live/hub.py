"""Every camera's live streams (`LiveStream`: "sub", what the analysis decodes, and
"main", the main stream read for the recording), what the web socket reads
(`web.live_api`) and the sink feeds with each analysed frame's record.

A record goes to a stream's viewers at its picture's media time: the sub-stream's from
the picture itself (`Frame.live_time`), the main stream's from the frame's place on
the recording (`Frame.record_time`), the same packets the main stream's live stream
copies. Nothing is built for a camera nobody watches.

How far behind live the page plays (`delay_s`, per stream) follows how late its records
come: the camera's measured analysis latency (capture to record, P95 over the last 10 s,
`metrics.window`) or, once records went to its viewers, how far behind the stream's live
edge they came (P95 of the newest, `live.stream.Lag`: a file's main stream is read
ahead of the analysis), whichever is larger, plus the fragment that waits for its next
packet, so a picture's boxes have arrived when it shows; a change of more than a quarter is
sent to the stream's viewers.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from pipeline.errors import one_line
from pipeline.frames import Frame
from pipeline.live.stream import LiveStream

log = logging.getLogger("pipeline.live")

MIN_DELAY_S, MAX_DELAY_S = 0.3, 3.0
MARGIN_S = 0.1  # beyond the P95 latency: a record sent, then read by the page
RESEND_S = 2.0  # the delay is looked at this often per camera
STREAMS = ("sub", "main")


def delay_for(latency_p95: float | None, fps: float) -> float:
    """How far behind the live edge to play: the analysis' P95 latency, a frame interval
    (a fragment leaves with its next packet) and a margin, clamped."""
    frame_s = 1 / fps if fps > 0 else 0.1
    delay = (latency_p95 or 0.0) + frame_s + MARGIN_S
    return round(min(MAX_DELAY_S, max(MIN_DELAY_S, delay)), 3)


@dataclass
class CameraLive:
    """One camera's streams, the pixel size its boxes are in and the delay sent to each."""

    streams: dict[str, LiveStream] = field(default_factory=dict)
    boxes: list[int] | None = None
    fps: float = 0.0
    delay_s: dict[str, float] = field(default_factory=dict)
    checked: float = 0.0


class LiveHub:
    """`latency(camera)`: the camera's P95 capture-to-record latency over the last
    seconds (None: not measured yet)."""

    def __init__(self, latency: Callable[[str], float | None] = lambda camera: None):
        self.latency = latency
        self._cameras: dict[str, CameraLive] = {}
        self._failed: set[str] = set()  # cameras whose records could not be sent: said once
        self._lock = threading.Lock()

    def stream(self, camera: str, kind: str) -> LiveStream:
        """The camera's live stream of `kind` (made on first use: a tap for its connection)."""
        with self._lock:
            cam = self._cameras.setdefault(camera, CameraLive())
            if kind not in cam.streams:
                cam.streams[kind] = LiveStream(camera, kind, lambda: self._describe(camera, kind))
            return cam.streams[kind]

    def find(self, camera: str, kind: str) -> LiveStream | None:
        """The stream a viewer asks for (None: the camera has none such); a camera whose
        main stream is not read apart plays the one it decodes (its init says which)."""
        cam = self._cameras.get(camera)
        if cam is None:
            return None
        return cam.streams.get(kind) or (cam.streams.get("sub") if kind == "main" else None)

    def _describe(self, camera: str, kind: str) -> dict:
        cam = self._cameras[camera]
        return {"boxes": cam.boxes, "delay_s": self._delay(camera, cam, kind)}

    def _delay(self, camera: str, cam: CameraLive, kind: str) -> float:
        late = [v for v in (self.latency(camera), cam.streams[kind].lag.p95()) if v is not None]
        cam.delay_s[kind] = delay_for(max(late, default=None), cam.fps)
        cam.checked = time.monotonic()
        return cam.delay_s[kind]

    def viewers(self) -> dict[str, int]:
        """The video sockets open on each watched camera (its streams together)."""
        counts = {camera: sum(s.viewers for s in list(cam.streams.values()))
                  for camera, cam in list(self._cameras.items())}
        return {camera: n for camera, n in counts.items() if n}

    def watched(self, camera: str) -> bool:
        cam = self._cameras.get(camera)
        return cam is not None and any(s.watched for s in list(cam.streams.values()))

    def failed(self, camera: str, error: Exception) -> None:
        """A record that could not go to the viewers: said once per camera, with its
        cause; the camera's files and its later records go on."""
        if camera not in self._failed:
            self._failed.add(camera)
            log.error("live video of %s: a frame's record could not be sent: %s", camera, one_line(error),
                      exc_info=error)

    def frame(self, frame: Frame, record: dict, boxes: tuple[int, int] | None,
              pixels: tuple[int, int] | None = None) -> None:
        """An analysed frame's record (its JSON line's), its boxes in `boxes` pixels, to
        the viewers of its camera's streams (the sink's thread; the camera is watched),
        with when its picture was captured (`captured`, wall clock: the page's latency)
        and its lines and zones as they stand (what the annotated video draws), from the
        analysed picture's `pixels` to the boxes'."""
        cam = self._cameras.get(frame.camera)
        if cam is None:
            return
        if frame.rate:
            cam.fps = float(frame.rate)
        cam.boxes = list(boxes) if boxes is not None else cam.boxes
        captured = time.time() - (time.perf_counter() - frame.t_capture)  # t_capture: a perf_counter reading
        message = dict(record, boxes=cam.boxes, captured=round(captured, 3),
                       **analytics(frame, scale_between(pixels, boxes)))
        for kind, stream in list(cam.streams.items()):
            if not stream.watched:
                continue
            t = frame.live_time if kind == "sub" else stream.recorded_at(frame.record_time)
            if t is not None:
                stream.record(t, message)
        if time.monotonic() - cam.checked >= RESEND_S:
            for kind, stream in list(cam.streams.items()):
                sent = cam.delay_s.get(kind, MIN_DELAY_S)
                now = self._delay(frame.camera, cam, kind)
                if stream.watched and abs(now - sent) > max(0.1, sent / 4):
                    stream.control({"type": "delay", "delay_s": now})


def scale_between(pixels: tuple[int, int] | None, boxes: tuple[int, int] | None) -> tuple[float, float]:
    """How the analysed picture's pixels become the boxes' (a sub-stream's lines and
    zones drawn over the main stream's boxes)."""
    if pixels is None or boxes is None or not all(pixels):
        return 1.0, 1.0
    return boxes[0] / pixels[0], boxes[1] / pixels[1]


def analytics(frame: Frame, scale: tuple[float, float]) -> dict:
    """The frame's counting lines and zones as the page's overlay draws them."""
    sx, sy = scale

    def at(x: float, y: float) -> list[float]:
        return [round(float(x) * sx, 1), round(float(y) * sy, 1)]

    out: dict = {}
    if frame.lines:
        out["lines"] = [{"name": ln.name, "points": [at(*ln.a), at(*ln.b)], "in": ln.into, "out": ln.out}
                        for ln in frame.lines]
    if frame.zones:
        out["zones"] = [{"name": z.name, "polygon": [at(x, y) for x, y in np.asarray(z.polygon).reshape(-1, 2)], "inside": z.inside,
                         "stationary": z.stationary} for z in frame.zones]
    return out
