"""`sources`: the cameras, each a video file or a URL (RTSP, HTTP, ...)."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from pipeline.config.limits import FRAMES_QUEUED, at_most, machine
from pipeline.config.outputs import RecordConfig
from pipeline.config.schema import (INVALID, Reader, describe_value, file_problem, is_url, local_path, non_negative,
                                    option, positive, read_file, read_polygons, read_string_map, within)

# A camera id names its output files: a plain name, never a path.
CAMERA_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def check_camera_id(value: str) -> str | None:
    if CAMERA_ID.fullmatch(value):
        return None
    return (f"{value!r} is not a camera id: letters, digits, '_', '.' and '-' only, not starting with '.' "
            f"(it names the camera's output files)")


def read_uri(r: Reader, raw: Any, where: str) -> str | Any:
    """A file (relative to the config) or a URL; a `file://` URL must name a regular file
    too (`Connection` checks again when it opens: a path can change)."""
    if not isinstance(raw, str) or not raw.strip():
        r.problem(where, "expected a file path or a URL")
        return INVALID
    if not is_url(raw):
        return read_file(r, raw, where)
    path = local_path(raw)
    why = file_problem(path) if path is not None else None
    if why is not None:
        r.problem(where, f"{why}: {raw}")
        return INVALID
    return raw


def read_record_override(r: Reader, raw: Any, where: str) -> dict[str, Any] | Any:
    """A camera's own recording settings: keys of `outputs.record`, checked as there; the
    keys it leaves out keep `outputs.record`'s values (`OutputsConfig.record_for`)."""
    if not isinstance(raw, dict):
        r.problem(where, f"expected a mapping, got {describe_value(raw)}")
        return INVALID
    if "export_max_s" in raw:
        r.problem(f"{where}.export_max_s", "one limit for every camera's exports: set outputs.record.export_max_s")
        return INVALID
    before = len(r.problems)
    record = r.record(RecordConfig, raw, where)
    if len(r.problems) > before:
        return INVALID
    return {str(k): getattr(record, str(k)) for k in raw}


@dataclass(kw_only=True)
class QueueConfig:
    size: int | None = option(None, check=at_most(FRAMES_QUEUED, "frames waiting in one lane", positive),
                              shown="planned; live: `1`",
                              doc="frames waiting in the camera's lane (default: files share about what keeps "
                                  "the detector's workers busy; live: the newest frame only)")
    policy: Literal["block", "drop_oldest"] | None = option(
        None, shown="`block`; live: `drop_oldest`",
        doc="full lane: `block` decode (files: lossless) or drop the oldest frame (live: latency stays flat)")


@dataclass(kw_only=True)
class ReconnectConfig:
    initial_s: float = option(0.5, check=positive, doc="first wait before reconnecting (doubles up to `max_s`)")
    max_s: float = option(8.0, check=positive, doc="longest wait between attempts")
    give_up_s: float = option(60.0, check=non_negative,
                              doc="mark the camera failed after this long without a frame (0: never; one analysed "
                                  "on its sub-stream retries it for as long as its main stream is recorded)")


@dataclass(kw_only=True)
class MotionConfig:
    """How a camera's motion is measured (used where the `detect` stage has `motion: true`)."""

    threshold: int = option(30, check=within(1, 255),
                            doc="a pixel has changed when its brightness differs from the background by this much "
                                "(0-255; with `contrast`, in a scene of full contrast)")
    min_area: float = option(0.0005, check=within(0, 1),
                             doc="the smallest change that counts as motion, a fraction of the frame's area")
    frame_height: int = option(100, check=within(16, 2160), doc="motion is measured on the luminance picture "
                                                                "scaled to this height (pixels)")
    background_s: float = option(5.0, check=positive,
                                 doc="how long a change takes to become background (the running average's time "
                                     "constant, seconds of video): slow light changes and parked objects fade in")
    recalibrate: float = option(0.8, check=within(0, 1),
                                doc="when this fraction of the frame changes at once (lights, day/night switch), the "
                                    "background is taken afresh and no motion is reported")
    contrast: bool = option(True, doc="adapt to the scene: a change of overall brightness (exposure, clouds) cancels "
                                      "out, and the threshold drops with the scene's contrast (dark, hazy; down to 1/4)")
    mask: list[list[tuple[float, float]]] = option(
        factory=list, read=read_polygons,
        doc="areas where motion is ignored (a clock, trees in the wind): polygons of [x, y] frame pixels")


@dataclass(kw_only=True)
class SourceConfig:
    id: str = option(check=check_camera_id, doc="camera id; names its output files (letters, digits, `_.-`)")
    uri: str = option(read=read_uri, doc="a video file (relative to the config) or a URL (`rtsp://`, `http://`, ...)")
    detect_uri: str | None = option(None, read=read_uri,
                                    doc="analyse this stream instead (the camera's sub-stream, e.g. 640x360): `uri` is "
                                        "then only recorded, never decoded (needs its `record`)")
    record: dict[str, Any] = option(factory=dict, read=read_record_override, shown="`outputs.record`",
                                    doc="this camera's recording: keys of `outputs.record` (e.g. `{enabled: false}`); "
                                        "the others as there")
    live: bool | None = option(None, shown="true for URLs",
                               doc="a camera: reconnects, drops stale frames, fragmented MP4 output")
    decoder: str | None = option(None, doc="a named FFmpeg decoder (e.g. `h264_cuvid`; a hardware decoder of another "
                                           "codec than the stream's is swapped for the one of the stream's codec, "
                                           "`hevc_cuvid` on HEVC); falls back to software")
    thread_count: int = option(1, check=at_most(lambda: machine().decode_threads, lambda: (
        f"decode threads per camera: the {machine().cores} visible cores, at least 16"), non_negative),
        doc="FFmpeg decode threads (0: auto); at most the visible cores, or 16")
    queue: QueueConfig = option(factory=QueueConfig, doc="the camera's lane in front of the detector")
    transport: Literal["tcp", "udp"] = option("tcp", doc="RTSP transport")
    open_timeout_s: float = option(5.0, check=positive, doc="connecting may take this long")
    read_timeout_s: float = option(5.0, check=positive,
                                   doc="a stream that yields no decodable frame for this long is broken")
    reconnect: ReconnectConfig = option(factory=ReconnectConfig, doc="live cameras: backoff and give-up")
    max_fps: float | None = option(None, check=positive, doc="process at most this many frames per second")
    stride: int = option(1, check=positive, doc="process every Nth frame")
    realtime: bool = option(False, doc="pace a file at its frame rate, as a camera would deliver it")
    phase_s: float = option(0.0, check=non_negative,
                            doc="a paced file starts this much later (cameras playing one clip are then not in step)")
    loop: bool = option(False, doc="replay a file forever (timestamps keep increasing)")
    motion: MotionConfig = option(factory=MotionConfig, doc="how motion is measured (`detect` with `motion: true`)")
    options: dict[str, str] = option(factory=dict, read=read_string_map,
                                     doc="FFmpeg demuxer/protocol options, e.g. `{buffer_size: 1048576}`")

    def finish(self, r: Reader, path: str) -> None:
        if self.live is None:
            self.live = bool(self.uri) and is_url(self.uri) and local_path(self.uri) is None
        if self.detect_uri and self.uri and is_url(self.detect_uri) != is_url(self.uri):
            r.problem(f"{path}.detect_uri",
                      "must be of the same kind as uri (both files or both URLs): the two streams are matched by time")

    @property
    def network(self) -> bool:
        """Read over a network: reconnects, and keeps its own live timeline."""
        return bool(self.live) and is_url(self.uri)

    def analysed(self) -> "SourceConfig":
        """The camera as its analysis reads it: its `detect_uri` where it has one."""
        return replace(self, uri=self.detect_uri) if self.detect_uri else self

    def resolved_queue(self) -> QueueConfig:
        """The policy by kind; a live camera's lane holds its newest frame only (a file's
        size is planned with the detector's engine)."""
        return QueueConfig(size=self.queue.size or (1 if self.live else None),
                           policy=self.queue.policy or ("drop_oldest" if self.live else "block"))
