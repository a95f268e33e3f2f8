"""Camera-like clips made from the sample, on demand, into a cache folder (never shipped:
a minute of 1080p is megabytes): what the density benchmark plays and the tests of
gating idle cameras need.

A camera sends H.264 at a fixed GOP (a keyframe every `gop_s`, no scene-cut keyframes),
with or without B-frames, at its own frame rate: the sample (`samples/vtest.mp4`, 768x576
at 10 fps) is scaled (stretched) to the clip's size and its frames re-timed to the clip's
rate. `idle` clips hold a still picture with sensor noise, then the activity, then still
again. Named clips (`clip(name)`) are made once into `$PIPELINE_CLIPS` (default
`~/.cache/pipeline/clips`), written beside and renamed into place, so two runs making the
same clip never see half of it.

    1080p           1920x1080, GOP 2 s, no B-frames
    1080p-bframes   the same with 2 B-frames
    360p            640x360, the sub-stream of `1080p` (same frames, times and GOP)
    1080p-idle      10 s still, 10 s of activity, 10 s still
    360p-idle       640x360, the sub-stream of `1080p-idle`

`started_at(path, s)` is a clip started from its keyframe at or after `s` seconds, what came
before moved to its end (by copy): cameras playing one clip so are not in step.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import av
from av.video.frame import PictureType
import cv2
import numpy as np

from pipeline.catalog.entries import SAMPLES_DIR

SAMPLE = SAMPLES_DIR / "vtest.mp4"


@dataclass(frozen=True)
class Encoding:
    """How a camera encodes: size, rate, keyframe interval, B-frames."""

    size: tuple[int, int] = (1920, 1080)
    fps: int = 15
    gop_s: float = 2.0
    bframes: int = 0
    crf: int = 23

    def options(self) -> dict[str, str]:
        gop = str(max(1, round(self.gop_s * self.fps)))
        return {"preset": "veryfast", "crf": str(self.crf), "g": gop, "keyint_min": gop, "sc_threshold": "0",
                "bf": str(self.bframes)}


def cache_dir() -> Path:
    return Path(os.environ.get("PIPELINE_CLIPS") or Path.home() / ".cache" / "pipeline" / "clips")


def _pictures(source: str | os.PathLike, size: tuple[int, int], seconds: float | None, fps: int) -> Iterator[np.ndarray]:
    """The source's frames as BGR at `size`, at most `seconds` of them at `fps`."""
    limit = None if seconds is None else round(seconds * fps)
    with av.open(str(source)) as c:
        for i, frame in enumerate(c.decode(video=0)):
            if limit is not None and i >= limit:
                return
            yield cv2.resize(frame.to_ndarray(format="bgr24"), size, interpolation=cv2.INTER_AREA)


def write_clip(path: str | os.PathLike, pictures: Iterator[np.ndarray], encoding: Encoding) -> str:
    """Encode BGR pictures as a camera would, frame i at time i / fps."""
    w, h = encoding.size
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=encoding.fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.time_base = Fraction(1, encoding.fps)
        stream.codec_context.options = encoding.options()
        for i, image in enumerate(pictures):
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24").reformat(format="yuv420p")
            vf.pts, vf.time_base = i, Fraction(1, encoding.fps)
            out.mux(stream.encode(vf))
        out.mux(stream.encode(None))
    return str(path)


def camera_clip(path: str | os.PathLike, encoding: Encoding = Encoding(), source: str | os.PathLike = SAMPLE,
                seconds: float | None = None) -> str:
    """The source as a camera at `encoding` would send it."""
    return write_clip(path, _pictures(source, encoding.size, seconds, encoding.fps), encoding)


def idle_clip(path: str | os.PathLike, encoding: Encoding = Encoding(), source: str | os.PathLike = SAMPLE,
              still_s: float = 10.0, active_s: float = 10.0, noise: float = 2.0, seed: int = 0) -> str:
    """Still (the first picture with sensor noise), activity, still again (the last picture)."""
    rng = np.random.default_rng(seed)
    still = round(still_s * encoding.fps)

    def noisy(image: np.ndarray) -> np.ndarray:
        grain = np.rint(rng.normal(0.0, noise, image.shape[:2])).astype(np.int16)[:, :, None]  # alike in each colour
        return np.clip(image + grain, 0, 255).astype(np.uint8)

    def pictures() -> Iterator[np.ndarray]:
        last = None
        for i, image in enumerate(_pictures(source, encoding.size, active_s, encoding.fps)):
            if i == 0:
                for _ in range(still):
                    yield noisy(image)
            yield image
            last = image
        assert last is not None, f"{source}: no pictures"
        for _ in range(still):
            yield noisy(last)

    return write_clip(path, pictures(), encoding)


def sub_stream(main: str | os.PathLike, path: str | os.PathLike, size: tuple[int, int] = (640, 360)) -> str:
    """A camera's low-resolution second stream of `main`: the same pictures at the same
    times, keyframes on the same frames."""
    with av.open(str(main)) as c, av.open(str(path), "w") as out:
        src = c.streams.video[0]
        stream = out.add_stream("libx264", rate=src.average_rate or 25)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.time_base = src.time_base
        stream.codec_context.options = {"preset": "veryfast", "crf": "23", "g": "100000", "sc_threshold": "0",
                                        "bf": "2" if src.codec_context.has_b_frames else "0"}
        for frame in c.decode(src):
            small = frame.reformat(size[0], size[1], "yuv420p")
            small.pts, small.time_base = frame.pts, frame.time_base
            small.pict_type = PictureType.I if frame.key_frame else PictureType.NONE  # keyframes as the main stream
            out.mux(stream.encode(small))
        out.mux(stream.encode(None))
    return str(path)


NAMES = ("1080p", "1080p-bframes", "360p", "1080p-idle", "360p-idle")


def started_at(path: str | os.PathLike, start_s: float) -> str:
    """The clip from its first keyframe at or after `start_s` (none: its start) to its end,
    then its start up to that keyframe, timestamps rising throughout: the same packets copied
    (never re-encoded), so a sub-stream and its main stream with keyframes on the same frames
    stay matched. Made once into the cache (keyed by the clip's path, size, time and that
    keyframe), like `clip`."""
    src = Path(path).resolve()
    with av.open(str(src)) as c:
        video = c.streams.video[0]
        held = [(p, bytes(p)) for p in c.demux(video) if p.size and p.pts is not None and p.dts is not None]
        tb = video.time_base
    if not held:
        raise ValueError(f"{src}: no video packets")
    cut = next((i for i, (p, _) in enumerate(held) if p.is_keyframe and p.pts * tb >= start_s - 1e-9), 0)
    if cut == 0:
        return str(src)
    st = src.stat()
    key = hashlib.sha1(f"{src}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:10]
    out = cache_dir() / "started" / f"{src.stem}-{key}-at{float(held[cut][0].pts * tb):g}s.mp4"
    if out.exists():
        return str(out)
    step = held[1][0].dts - held[0][0].dts if len(held) > 1 else 1
    end = max(p.pts for p, _ in held) + (held[-1][0].duration or step)
    moved = [(p, data, -held[cut][0].dts) for p, data in held[cut:]] + \
            [(p, data, end - held[cut][0].dts) for p, data in held[:cut]]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=".mp4", dir=out.parent)
    os.close(fd)
    try:
        with av.open(str(src)) as c, av.open(tmp, "w") as o:
            stream = o.add_stream_from_template(c.streams.video[0])
            last = None
            for p, data, shift in moved:
                q = av.Packet(data)
                q.pts, q.dts, q.time_base, q.stream = p.pts + shift, p.dts + shift, tb, stream
                q.is_keyframe = p.is_keyframe
                if last is not None and q.dts <= last:
                    raise ValueError(f"{src}: its decode times would not rise started at {start_s:g} s")
                last = q.dts
                o.mux(q)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return str(out)


def clip_or_file(name: str, fps: int = 15) -> str:
    """A made clip by its name (see `NAMES`), else the file `name`."""
    return clip(name, fps) if name in NAMES else os.path.abspath(name)


def clip(name: str, fps: int = 15) -> str:
    """A named clip at `fps` (see the module's doc), made into the cache on first use."""
    if name not in NAMES:
        raise ValueError(f"unknown clip {name!r} (known: {', '.join(NAMES)})")
    path = cache_dir() / f"vtest-{name}-{fps}fps.mp4"
    if path.exists():
        return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".mp4", dir=path.parent)
    os.close(fd)
    try:
        if name.startswith("360p"):
            sub_stream(clip(name.replace("360p", "1080p"), fps), tmp)
        elif name == "1080p-idle":
            idle_clip(tmp, Encoding(fps=fps))
        else:
            camera_clip(tmp, Encoding(fps=fps, bframes=2 if name == "1080p-bframes" else 0))
        os.chmod(tmp, 0o644)  # a temporary file is its owner's alone; the clip is for anyone
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return str(path)
