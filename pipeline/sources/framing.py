"""What becomes of each decoded picture of a camera, in the camera's own thread: its number
and its time on the camera's timeline (`Timeline`), the gate's verdict (`FrameGate`), a
paced file's wait until the frame is due, whether the detector sees it (`DetectGate`:
the detection rate and motion, on the decoded picture) and then the frame the graph
gets: for the detector, its model input, letterboxed here (from the decoded planes where
nothing needs the BGR picture; regions are cut from the BGR picture); a frame
the detector does not see is handed on as decoded (converted only if a stage asks).

Preprocessing runs here rather than in a shared stage: it parallelises across cameras for
free, and the frame then lands in the camera's own lane of the detector's batcher, where
a live camera's `drop_oldest` policy discards stale frames without ever blocking decode.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Protocol

import av

from pipeline.config import SourceConfig
from pipeline.config.stages import DetectRate
from pipeline.errors import one_line
from pipeline.frames import DetectPlan, Frame, Resume, seconds
from pipeline.metrics.registry import Metrics
from pipeline.preprocess import Preprocessor
from pipeline.sources.connection import TapLink
from pipeline.sources.detect_gate import DetectGate
from pipeline.sources.gate import FrameGate
from pipeline.sources.timeline import Timeline

log = logging.getLogger("pipeline.source")


class Decoded(Protocol):
    """The connection a picture came from (`sources.connection.Connection`)."""

    time_base: object
    rate: object
    link: TapLink | None


class Framing:
    """One camera's frames, made from its decoded pictures. Made when the camera's thread
    starts: a paced file's first frame is due then."""

    def __init__(self, config: SourceConfig, preprocess: Preprocessor, metrics: Metrics, resume: Resume,
                 wait: Callable[[float], None], gate: DetectGate | None = None,
                 stopping: Callable[[], bool] = lambda: False,
                 place: Callable[[int, float], float | None] | None = None):
        self.config = config
        self.camera = config.id
        self.preprocess = preprocess
        self.metrics = metrics
        self.resume = resume  # frames of its file processed elsewhere; where its numbering and timeline continue
        self.wait = wait  # sleeps, waking when the camera is stopped
        self.gate = FrameGate(config.stride, config.max_fps)
        self.detect = gate or DetectGate(DetectRate(), config.motion)
        self.stopping = stopping  # the camera is stopped: a wait for its tracker ends
        self.place = place  # a file's sub-stream frame -> its time on the main stream's recording (by pass)
        self._motion_failed = False
        self.timeline = Timeline(config.id, config.network, config.loop, phase_s=config.phase_s)
        self.paced = config.realtime or (bool(config.live) and not config.network)
        self.next_due: float | None = None  # paced: when the next frame is about due
        self.seq = resume.seq  # the next frame's number
        self._time_offset: int | None = None  # the resumed timeline's start, in the output time base

    def __call__(self, vf: av.VideoFrame, connection: Decoded) -> Frame | None:
        """The frame to hand on, or None: skipped by the gate, processed before this camera
        moved here, or not preprocessable (each counted)."""
        now = time.perf_counter()
        seq = self.seq
        self.seq += 1
        tb = self.timeline.time_base(connection.time_base)
        pts = self.timeline.pts(vf.pts, connection.time_base, connection.rate)
        if self._time_offset is None:  # a resumed live camera (or returning id) continues its timeline
            self._time_offset = round(self.resume.time_s / tb) - pts if self.resume.time_s else 0
        pts += self._time_offset
        t = seconds(pts, tb)
        reason = self.gate.reject(seq, t)  # also for skipped frames: the same frames are kept
        if seq < self.resume.start_at:
            return None  # processed before this camera moved here
        self.metrics.frame_in(self.camera, skipped=reason)
        if reason:
            return None
        if self.paced:
            now = self._due(pts, tb, now, connection.rate)
        frame = Frame(camera=self.camera, seq=seq, pts=pts, time_base=tb, image=None, t_capture=now,
                      rate=connection.rate, picture=vf)
        frame.stamps["capture"] = now
        link = connection.link
        if link is not None and link.offset is not None and vf.pts is not None:
            frame.record_time = (vf.pts + link.offset) * link.seconds
        elif self.config.detect_uri:  # the main stream is recorded (docs/outputs.md, "Recordings")
            frame.record_time = frame.pts_seconds if self.place is None \
                else self.place(self.timeline.passes - 1, self._after_first(pts - self._time_offset, tb))
        frame.plan = self._plan(vf, t)
        if not frame.plan.run:
            self.detect.handed(seq, t)
            return frame  # the detector does not see it: no model input
        try:
            self._inputs(frame)
        except Exception as e:
            self.metrics.error(self.camera)
            self.metrics.drop(self.camera, "preprocess_error")
            log.warning("camera %s frame %d: preprocess failed: %s", self.camera, seq, one_line(e))
            return None
        frame.stamp("preprocess")
        self.detect.handed(seq, t)
        return frame

    def _after_first(self, pts: int, tb) -> float:
        """How long after its pass's first picture a file's picture is shown (seconds): a
        sub-stream's frame lies as far after the first picture of the same pass of its main
        stream (a live camera's is matched by arrival, both on the camera's clock)."""
        return seconds(pts - (self.timeline.pass_first or 0), tb)

    def _inputs(self, frame: Frame) -> None:
        """The detector's input: the whole frame letterboxed, or each of its regions, cut
        from the full-resolution picture."""
        regions = frame.plan.regions if frame.plan is not None else None
        if regions is None:
            frame.tensor, frame.letterbox = self.preprocess.frame(frame)
            return
        frame.region_inputs = []
        for x1, y1, x2, y2 in regions.astype(int):
            tensor, box = self.preprocess(frame.image[y1:y2, x1:x2])
            box.offset_x, box.offset_y = float(x1), float(y1)
            frame.region_inputs.append((tensor, box))

    def _plan(self, vf: av.VideoFrame, t: float) -> DetectPlan:
        """Whether the detector sees the frame; it does when its motion cannot be measured
        (counted, said once)."""
        t0 = time.perf_counter()
        try:
            plan = self.detect.plan(vf, t, self.stopping)
        except Exception as e:
            self.metrics.error(self.camera)
            if not self._motion_failed:
                log.warning("camera %s: motion cannot be measured (%s): the detector sees every frame of the rate",
                            self.camera, one_line(e))
            self._motion_failed = True
            return DetectPlan(True, "every")
        if plan.motion is not None:
            self.metrics.stage_busy("motion", time.perf_counter() - t0)
        return plan

    def _due(self, pts: int, tb, now: float, rate) -> float:
        """A paced file plays a camera: its frame arrives at its due time; when we get to it
        late, it waited meanwhile (as in a camera's socket): stamped when due."""
        due = self.timeline.due(pts, tb)
        if due > now:
            self.wait(due - now)
        self.next_due = due + rate.denominator / rate.numerator
        return due
