"""The live view's pictures: each camera's newest annotated frame as a JPEG, made only
while someone watches that camera, at most `fps` per camera.

The sink offers every frame (a reference: no copy, no work); a watched camera's frame is
taken when its last picture is about `1/fps` old and one encoder thread encodes it at
once; the frames in between are skipped. A frame is shown in the picture `sinks.views`
made for it: the annotated video's, or one made because `wants` said it would be taken.
Nobody watching costs two dictionary lookups per frame. A slow viewer slows only its own connection: it always gets the newest JPEG when
it is ready for one. A camera is watched while a stream is open (`watch` / `unwatch`)
and for a while after each still picture asked for (`watch_for`): a viewer fetching
stills at the live rate keeps it watched, and each fetch gets the newest picture, not
an encoding of its own. `viewers` counts what is watched now: each open stream and each
viewer's camera fetching stills (a page names itself; stills from no one in particular
count once per camera).

The tuning view (`motion`) is each camera's newest frame that measured motion: its
motion boxes, mask and the regions the detector looked at, in frame pixels, for the page
to draw over the picture; the sink's offer keeps a reference, the record is made when
asked for.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np

from pipeline.frames import Frame


@dataclass
class Picture:
    jpeg: bytes
    seq: int
    captured: float  # wall-clock time (time.time()) the frame was captured: for viewers' latency


class Preview:
    def __init__(self, fps: float = 5.0, quality: int = 70, width: int = 640):
        self.interval = 1.0 / fps
        self.quality = quality
        self.width = width
        self._watchers: dict[str, int] = {}
        self._watched_until: dict[str, float] = {}  # still viewers: time.monotonic() of their lease's end
        self._still_viewers: dict[tuple[str, str], float] = {}  # (camera, viewer) -> its lease's end
        self._offered: dict[str, Frame] = {}
        self._last_encoded: dict[str, float] = {}
        self._pictures: dict[str, Picture] = {}
        self._motion: dict[str, tuple] = {}  # camera -> (seq, (w, h), DetectPlan, detected) of its newest motion
        self._cond = threading.Condition()
        self._listeners: list[Callable[[str], None]] = []
        self._closed = False
        self.encoded = 0
        self._thread = threading.Thread(target=self._encode_loop, name="preview", daemon=True)
        self._thread.start()

    def wants(self, camera: str) -> bool:
        """Whether the camera's next frame would be taken: it is watched and its last
        picture is about `1/fps` old (`sinks.views` makes the picture of such a frame)."""
        now = time.monotonic()
        if not self._watchers.get(camera) and self._watched_until.get(camera, 0.0) < now:
            return False
        return now - self._last_encoded.get(camera, -1e9) >= 0.9 * self.interval

    def offer(self, frame: Frame) -> None:
        """Called by the sink for every frame. A watched camera's frame is taken when its
        last picture is about `1/fps` old and the frame has a picture to show, and encoded
        at once; the others are skipped, never held (holding one for later would only make
        the picture older). Every frame's motion is kept for the tuning view."""
        if frame.plan is not None and frame.plan.motion is not None:
            self._motion[frame.camera] = (frame.seq, frame.size, frame.plan, frame.detected)
        if frame.view is None or not self.wants(frame.camera):
            return
        now = time.monotonic()
        with self._cond:
            self._last_encoded[frame.camera] = now
            self._offered[frame.camera] = frame
            self._cond.notify_all()

    def watch(self, camera: str) -> None:
        with self._cond:
            self._watchers[camera] = self._watchers.get(camera, 0) + 1

    def unwatch(self, camera: str) -> None:
        with self._cond:
            self._watchers[camera] = max(0, self._watchers.get(camera, 0) - 1)
            if not self._watchers[camera]:
                self._offered.pop(camera, None)

    def watch_for(self, camera: str, seconds: float, viewer: str = "") -> bool:
        """Count `camera` as watched (by `viewer`) for `seconds` from now; True when it was
        watched already (its newest picture is current, not one from before anyone looked)."""
        with self._cond:
            now = time.monotonic()
            current = bool(self._watchers.get(camera)) or self._watched_until.get(camera, 0.0) >= now
            self._watched_until[camera] = max(self._watched_until.get(camera, 0.0), now + seconds)
            self._still_viewers = {k: t for k, t in self._still_viewers.items() if t >= now}
            self._still_viewers[(camera, viewer)] = now + seconds
            return current

    @property
    def viewers(self) -> int:
        """Open streams plus the viewers' cameras fetching stills now (a page's tiles in view)."""
        now = time.monotonic()
        with self._cond:
            return sum(self._watchers.values()) + sum(1 for t in self._still_viewers.values() if t >= now)

    @property
    def watched(self) -> int:
        """Cameras watched now (by a stream or stills): their pictures are made."""
        now = time.monotonic()
        with self._cond:
            return len({c for c, n in self._watchers.items() if n} |
                       {c for c, t in self._watched_until.items() if t >= now})

    def measures_motion(self) -> list[str]:
        """The cameras whose frames measured motion (the tuning view has something to draw)."""
        return sorted(self._motion)

    def latest(self, camera: str, after_seq: int = -1, timeout: float = 1.0) -> Picture | None:
        """The camera's newest picture once it is newer than `after_seq` (None on timeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                pic = self._pictures.get(camera)
                if pic is not None and pic.seq != after_seq:
                    return pic
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
        return None

    def listen(self, made: Callable[[str], None]) -> None:
        """Call `made(camera)` (on the encoder's thread: it must return at once) after each
        new picture, so a server on an event loop waits for pictures without a thread
        blocked in `latest` per viewer."""
        self._listeners.append(made)

    def motion(self, camera: str) -> dict | None:
        """The tuning view of the camera's newest frame that measured motion (None: none
        has): boxes, mask polygons and regions in frame pixels."""
        entry = self._motion.get(camera)
        if entry is None:
            return None
        seq, (w, h), plan, detected = entry
        motion = plan.motion
        rows = lambda a: [[round(float(v), 1) for v in r] for r in a]  # noqa: E731
        return {"seq": seq, "width": w, "height": h, "boxes": rows(motion.boxes),
                "changed": round(motion.changed, 4), "recalibrated": motion.recalibrated,
                "mask": [[list(p) for p in polygon] for polygon in motion.mask],
                "regions": None if plan.regions is None else rows(plan.regions), "run": plan.run,
                "reason": plan.reason, "detected": detected}

    def _encode_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._offered:
                    self._cond.wait()
                if self._closed:
                    return
                taken, self._offered = self._offered, {}
            for cam, frame in taken.items():
                picture = self._encode(frame)
                with self._cond:
                    self._pictures[cam] = picture
                    self.encoded += 1
                    self._cond.notify_all()
                for made in self._listeners:
                    made(cam)

    def _encode(self, frame: Frame) -> Picture:
        assert frame.view is not None
        image = frame.view.image
        h, w = image.shape[:2]
        if w > self.width:
            image = cv2.resize(image, (self.width, round(h * self.width / w)), interpolation=cv2.INTER_AREA)
        ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        captured = time.time() - (time.perf_counter() - frame.t_capture)
        return Picture(np.asarray(buf).tobytes() if ok else b"", frame.seq, captured)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(5)
