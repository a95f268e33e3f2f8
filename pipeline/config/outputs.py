"""`outputs`, `metrics` and `runtime`: where results go, how the run reports, its budget."""
from __future__ import annotations

import os
import re
import string
from dataclasses import dataclass, replace
from typing import Any, Literal

from pipeline.config.limits import CLIP_S, EVENTS_BUFFERED, FRAMES_QUEUED, at_most, machine
from pipeline.config.schema import (INVALID, Reader, describe_value, non_negative, option, positive, read_path,
                                    read_string_map, within)
from pipeline.redact import userinfo_problem

PLACEHOLDERS = ("camera", "start")
LIVE_SEGMENT_S = 3600.0  # a live camera's default segment: an hour


def stamped(template: str) -> str:
    """A file name template with `{start}` (the segment's start time): put before the
    extension when the template has none."""
    if "{start}" in template:
        return template
    stem, ext = os.path.splitext(template)
    return f"{stem}.{{start}}{ext}"


def segment_length(v: float) -> str | None:
    """Segment names count whole seconds: shorter segments would share names."""
    return None if v == 0 or v >= 1 else f"must be 0 (off) or >= 1, got {v}"


def segment_for(segment_s: float | None, live: bool) -> float | None:
    """A segment length as configured, in seconds (None: off; unset: an hour for live cameras)."""
    if segment_s is None:
        return LIVE_SEGMENT_S if live else None
    return segment_s or None


def template_problem(value: str, need_camera: bool) -> str | None:
    """Why a file name template is unusable (None when it is fine)."""
    if not value or value.endswith(("/", os.sep)):
        return "expected a file name"
    try:
        parsed = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(value) if name is not None]
    except ValueError as e:
        return f"not a valid template: {e}"
    names = [name for name, _, _ in parsed]
    unknown = sorted({n for n in names if n not in PLACEHOLDERS})
    if unknown:
        return (f"unknown placeholder {', '.join('{' + u + '}' for u in unknown)} "
                f"(known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
    if any(spec or conv for _, spec, conv in parsed):
        return "placeholders take no format spec or conversion"
    if need_camera and "camera" not in names:
        return "must contain {camera}: one video file per camera"
    if os.path.isabs(value) or ".." in value.replace("\\", "/").split("/"):
        return "must be a file name inside outputs.dir"
    return None


def read_template(need_camera: bool) -> Any:
    def read(r: Reader, raw: Any, where: str) -> str | Any:
        if not isinstance(raw, str):
            r.problem(where, f"expected a string, got {describe_value(raw)}")
            return INVALID
        message = template_problem(raw, need_camera)
        if message:
            r.problem(where, message)
            return INVALID
        return raw
    return read


def read_video_template(r: Reader, raw: Any, where: str) -> str | Any:
    value = read_template(True)(r, raw, where)
    if value is not INVALID and not os.path.splitext(value)[1]:
        r.problem(where, "needs a file extension naming the container (e.g. .mp4, .mkv)")
        return INVALID
    return value


@dataclass(kw_only=True)
class VideoOutputConfig:
    enabled: bool = option(True, doc="write an annotated video per camera")
    codec: str = option("libx264", doc="FFmpeg encoder (`h264_nvenc` falls back to `libx264` where missing)")
    preset: str = option("ultrafast", doc="x264/x265 preset")
    crf: int = option(23, check=within(0, 63), doc="x264/x265 quality (lower is better)")
    filename: str = option("{camera}.mp4", read=read_video_template,
                           doc="file name template; `{camera}` is the camera id, `{start}` a segment's start time (UTC, "
                               "`20261201T120000Z`); the extension picks the container")
    options: dict[str, str] = option(factory=dict, read=read_string_map,
                                     doc="more options of `codec` (not given to the libx264 fallback)")
    fragmented: bool | None = option(None, shown="live cameras",
                                     doc="fragmented MP4 flushed every second: playable even after kill -9")
    segment_s: float | None = option(None, check=segment_length, shown="3600 for live cameras, off for files",
                                     doc="start a new file (and JSON lines file) every this many seconds, named by "
                                         "its start time (`{start}`, put before the extension if absent); 0: off")
    max_height: int | None = option(None, check=within(16, 8192), shown="the camera's",
                                    doc="draw and encode a copy scaled down to this height (e.g. 540; the frame keeps "
                                        "its full size for crops, snapshots and the JSON lines)")
    fps: float | None = option(None, check=positive, shown="the camera's",
                               doc="at most this many frames per second in the video (every frame still reaches the "
                                   "JSON lines)")

    def segment_for(self, live: bool) -> float | None:
        """A camera's segment length in seconds (None: one file, cut only by a resolution change)."""
        return segment_for(self.segment_s, live)


RECORD_CONTAINERS = (".mp4", ".mov", ".mkv")


def read_record_template(r: Reader, raw: Any, where: str) -> str | Any:
    value = read_template(True)(r, raw, where)
    if value is not INVALID and os.path.splitext(value)[1].lower() not in RECORD_CONTAINERS:
        r.problem(where, f"the extension names the container: one of {', '.join(RECORD_CONTAINERS)}")
        return INVALID
    return value


@dataclass(kw_only=True)
class RecordConfig:
    enabled: bool = option(False, doc="record what the camera sends: its packets, neither decoded nor encoded")
    filename: str = option("{camera}.rec.{start}.mp4", read=read_record_template,
                           doc="file name template: `{camera}`, `{start}` (the segment's start, UTC; put before the "
                               "extension if absent); `.mp4` / `.mov` are fragmented (playable to the last "
                               "keyframe after a crash); audio a container cannot hold is left out, said (G.711 fits "
                               "`.mov` only)")
    segment_s: float | None = option(None, check=segment_length, shown="`outputs.video.segment_s`",
                                     doc="start a new file at the first keyframe after every this many seconds "
                                         "(on the same boundaries as the video and the JSON lines); 0: off")
    audio: bool = option(True, doc="copy the camera's audio too where the container holds it (said once where not)")
    queue: int = option(512, check=positive,
                        doc="packets waiting for the writer; beyond, packets are dropped up to the next keyframe "
                            "(counted)")
    export_max_s: float = option(3600.0, check=positive,
                                 doc="the longest time range one export covers (`GET /api/export`, `pipeline export`; "
                                     "the same for every camera)")

    def segment_for(self, live: bool, video_segment_s: float | None) -> float | None:
        """Its segment length (None: one file, cut only where the stream changes)."""
        return segment_for(self.segment_s if self.segment_s is not None else video_segment_s, live)


@dataclass(kw_only=True)
class RetainConfig:
    max_gb: float | None = option(None, check=positive, shown="no limit",
                                  doc="remove the oldest finished files while the folder holds more")
    max_days: float | None = option(None, check=positive, shown="no limit",
                                    doc="remove finished files older than this")


@dataclass(kw_only=True)
class JsonlOutputConfig:
    enabled: bool = option(True, doc="write one JSON line per frame")
    filename: str = option("detections.jsonl", read=read_template(False),
                           doc="`{camera}` in the name gives one file per camera (cut with its video's segments); "
                               "without, all cameras share one (with segments: rotated on the wall clock)")
    flush_s: float = option(1.0, check=non_negative,
                            doc="flush to disk at least this often (0: every line), like the fragmented MP4")


@dataclass(kw_only=True)
class WebConfig:
    port: int = option(check=within(0, 65535), doc="serve the live page, `/api/cameras` and `/metrics` here (0: any)")
    host: str = option("127.0.0.1", doc="the address to listen on (127.0.0.1: this machine only)")
    token: str | None = option(None, doc="require this bearer token (header, `?token=` or the page's cookie)")
    fps: float = option(5.0, check=positive, doc="most frames per second per camera sent to viewers")
    quality: int = option(70, check=within(10, 100), doc="JPEG quality of the live view")
    width: int = option(640, check=positive, doc="live view frames are scaled down to at most this width")
    control: bool = option(False, doc="add and remove cameras over HTTP (`POST /api/cameras`, "
                                      "`DELETE /api/cameras/<id>`) and reload the config (`POST /api/reload`); "
                                      "needs `token`")

    def finish(self, r: Reader, path: str) -> None:
        """Whoever reaches the port could start reading any URL or file as a camera: never without a token."""
        if self.control and not self.token:
            r.problem(f"{path}.control", "adding and removing cameras over HTTP needs outputs.web.token")


def topic_prefix_problem(v: str) -> str | None:
    """A topic prefix to publish under: levels without wildcards, none of them empty."""
    return None if v and "+" not in v and "#" not in v and "" not in v.split("/") else \
        f"expected MQTT topic levels without wildcards or empty levels, got {v!r}"


def node_id_problem(v: str) -> str | None:
    """Home Assistant reads the node id from the discovery topic: letters, digits, `_` and `-` only."""
    return None if re.fullmatch(r"[A-Za-z0-9_-]+", v) else f"letters, digits, '_' and '-' only, got {v!r}"


@dataclass(kw_only=True)
class HomeAssistantConfig:
    discovery_prefix: str = option("homeassistant", check=topic_prefix_problem,
                                   doc="Home Assistant's MQTT discovery prefix")
    node_id: str = option("pipeline", check=node_id_problem,
                          doc="names this process to Home Assistant: its discovery topics, unique ids and "
                              "availability topic `<node_id>/availability` (one per process sharing a broker)")
    interval_s: float = option(1.0, check=positive,
                               doc="most often a camera's state message goes out (motion and objects seen in "
                                   "between still show)")


@dataclass(kw_only=True)
class MqttConfig:
    host: str = option(doc="the broker")
    port: int = option(1883, check=within(1, 65535), doc="its port")
    topic: str = option("pipeline/{camera}/events", doc="`{camera}` is the camera id")
    qos: int = option(1, check=within(0, 2), doc="MQTT quality of service")
    client_id: str | None = option(None, doc="default: pipeline-<pid>")
    username: str | None = option(None, doc="broker login")
    password: str | None = option(None, doc="broker password")
    buffer: int = option(10000, check=at_most(EVENTS_BUFFERED, "events held in memory", positive),
                         doc="events kept while the broker is away, besides the one being sent (then the oldest "
                             "drop, counted)")
    homeassistant: HomeAssistantConfig | None = option(None, shown="off",
                                                       doc="announce each camera to Home Assistant (MQTT discovery) "
                                                           "and keep its state there (`{}`: the defaults)")


@dataclass(kw_only=True)
class WebhookConfig:
    url: str = option(doc="POST each batch of events here as JSON (http:// or https://)")
    timeout_s: float = option(5.0, check=positive, doc="a POST may take this long")
    buffer: int = option(10000, check=at_most(EVENTS_BUFFERED, "events held in memory", positive),
                         doc="events kept while the endpoint fails, besides the batch being sent (then the oldest "
                             "drop, counted)")

    def finish(self, r: Reader, path: str) -> None:
        """A URL urllib would refuse (or send elsewhere) is found before anything starts."""
        from urllib.parse import urlsplit

        from pipeline.redact import redact

        if self.url is None:
            return
        try:
            parts = urlsplit(self.url)
            _ = parts.port  # raises ValueError for a port that is no number in 0..65535
            usable = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:  # that, or a broken IPv6 address
            usable = False
        if not usable:
            r.problem(f"{path}.url", f"expected an http:// or https:// URL with a host, got {redact(self.url)!r}")


@dataclass(kw_only=True)
class ClipsConfig:
    pre_s: float = option(5.0, check=at_most(CLIP_S, "seconds of a clip before its event", non_negative),
                          doc="seconds before the event (from the keyframe at or before)")
    post_s: float = option(5.0, check=at_most(CLIP_S, "seconds of a clip after its event", non_negative),
                           doc="seconds after the event (events close together share a clip)")
    max_mb: float = option(64.0, check=at_most(lambda: machine().memory / 2 / 1e6, "half of this machine's memory",
                                               positive),
                           doc="the most one clip holds; half of it is the encoded video a camera keeps in memory "
                               "for pre-rolls")
    max_s: float = option(60.0, check=at_most(CLIP_S, "seconds of one clip", positive),
                          doc="events close together share a clip while it is shorter than this; past it, the next "
                              "event starts a new clip with its own pre-roll (a clip: at most `max_s` + `post_s`)")


@dataclass(kw_only=True)
class EventsConfig:
    mqtt: MqttConfig | None = option(None, shown="off", doc="publish events to an MQTT broker")
    webhook: WebhookConfig | None = option(None, shown="off", doc="POST events to an HTTP endpoint")
    snapshots: bool = option(False, doc="save the frame that confirmed each event (and the object's crop) as JPEG "
                                        "under `events/<camera>/`; MQTT also gets it on `pipeline/<camera>/snapshot`")
    clips: ClipsConfig | None = option(None, shown="off", doc="a short MP4 around each event, cut from the encoded "
                                                              "video (no second encode)")
    flush_timeout_s: float = option(5.0, check=non_negative,
                                    doc="at shutdown, unsent events get this long to go out (then count as dropped)")
    retain: RetainConfig | None = option(None, shown="keep all",
                                         doc="a budget for `events/` (snapshots, clips): oldest removed first")


def store_url_problem(v: str) -> str | None:
    """A store URL libpq reads as written: its user info (`redact.userinfo_problem`) too."""
    if not re.match(r"postgres(ql)?://", v):
        return "must be a PostgreSQL URL (postgresql://user@host/db)"
    return userinfo_problem(v)


@dataclass(kw_only=True)
class StoreConfig:
    enabled: bool = option(True, doc="keep every track, event, recording segment and per-minute count in a "
                                     "database (`false` for the section: off)")
    path: str = option("store.db", doc="the SQLite file, relative to `outputs.dir`")
    url: str | None = option(None, check=store_url_problem, shown="SQLite at `path`",
                             doc="a PostgreSQL server instead (`postgresql://user:pass@host/db`): several hosts, "
                                 "one store")
    queue: int = option(10000, check=within(16, 1_000_000),
                        doc="frames waiting for the store's writer; a full queue drops them, counted lost")
    flush_s: float = option(0.5, check=within(0.05, 10), doc="rows are written in one transaction this often")
    buffer_s: float = option(30.0, check=within(0, 3600),
                             doc="rows the database refused (PostgreSQL away, a full disk) are tried again for "
                                 "this long, then counted lost")
    max_days: float | None = option(None, check=positive, shown="keep all",
                                    doc="tracks and events older than this leave the store")
    counts_max_days: float | None = option(None, check=positive, shown="keep all",
                                           doc="per-minute counts older than this leave the store")
    recordings_kept: Literal["all", "motion", "active_objects"] = option(
        "all", doc="recording segments older than `recordings_days`: all kept, or only those with motion (`motion`) "
                   "or with objects (`active_objects`), as their activity in the store says (Frigate's retain modes)")
    recordings_days: float | None = option(None, check=positive, shown="off",
                                           doc="the age (days) after which `recordings_kept` applies")

    def finish(self, r: Reader, path: str) -> None:
        if self.max_days is not None and self.counts_max_days is not None and self.counts_max_days < self.max_days:
            r.problem(f"{path}.counts_max_days", f"must be at least max_days ({self.max_days:g}): "
                      "counts are kept longest")
        if self.recordings_kept != "all" and self.recordings_days is None:
            r.problem(f"{path}.recordings_days", f"required with recordings_kept: {self.recordings_kept}")


def read_store(r: Reader, raw: Any, where: str) -> StoreConfig | Any:
    """`outputs.store: false` turns the store off (`true`: its defaults); a mapping sets its keys."""
    if isinstance(raw, bool):
        return StoreConfig(enabled=raw)
    return r.record(StoreConfig, raw, where)


def read_folder(r: Reader, raw: Any, where: str) -> str | Any:
    """A folder relative to the config, made absolute: one meaning, whichever folder the
    command runs from."""
    value = read_path(r, raw, where)
    return value if value is INVALID else os.path.abspath(value)


@dataclass(kw_only=True)
class OutputsConfig:
    dir: str = option("out", read=read_folder, doc="output folder (relative to the config, or `--output`)")
    video: VideoOutputConfig = option(factory=VideoOutputConfig, doc="annotated video")
    jsonl: JsonlOutputConfig = option(factory=JsonlOutputConfig, doc="JSON lines metadata")
    record: RecordConfig = option(factory=RecordConfig,
                                  doc="a recording of what each camera sends (per camera: `sources[].record`)")
    web: WebConfig | None = option(None, shown="off", doc="the live web view (opt-in)")
    events: EventsConfig = option(factory=EventsConfig,
                                  doc="line crossings, zone entries/exits and camera states, as they happen")
    retain: RetainConfig | None = option(None, shown="keep all",
                                         doc="a budget for the videos and JSON lines (not `events/`): the oldest "
                                             "finished segments are removed first, never an open one")
    store: StoreConfig = option(factory=StoreConfig, read=read_store,
                                doc="the store of tracks, events, recording segments and counts (`false`: off)")

    def finish(self, r: Reader, path: str) -> None:
        """The default folder sits beside the config like a given one, never in the working
        directory (a config run from elsewhere would write into whatever `out/` is there);
        a given folder is absolute already (`read_folder`)."""
        if not os.path.isabs(self.dir):
            self.dir = read_folder(r, self.dir, f"{path}.dir")

    def record_for(self, overrides: dict[str, Any]) -> RecordConfig:
        """A camera's recording settings: `record` with the camera's own keys (`sources[].record`)."""
        return replace(self.record, **overrides) if overrides else self.record

    def video_path(self, camera: str, start: str | None = None) -> str:
        """The camera's video file; with `start`, its time-named segment starting then
        (without, a template with `{start}` keeps it as a pattern)."""
        return self._path(self.video.filename, camera, start)

    def jsonl_path(self, camera: str, start: str | None = None) -> str:
        return self._path(self.jsonl.filename, camera, start)

    def record_path(self, camera: str, filename: str, start: str | None = None) -> str:
        """A recording's segment (`filename`: the camera's `record.filename`); always time-named."""
        return self._path(stamped(filename), camera, start)

    def _path(self, template: str, camera: str, start: str | None) -> str:
        if start is not None:
            template = stamped(template)
        return os.path.join(self.dir, template.format(camera=camera, start="{start}" if start is None else start))


@dataclass(kw_only=True)
class MetricsConfig:
    log_interval_s: float = option(5.0, check=positive, doc="periodic log line when not on a terminal")
    prometheus_port: int | None = option(None, check=within(0, 65535),
                                         doc="serve `/metrics` on 127.0.0.1 (0: any free port, printed)")
    report: str | None = option(None, read=read_path, doc="write the final metrics as JSON here (or `--report`)")


@dataclass(kw_only=True)
class RuntimeConfig:
    threads: int | None = option(None, check=positive, shown="visible cores",
                                 doc="cores the thread plan may use (capped at the visible cores)")
    queue_size: int = option(4, check=at_most(FRAMES_QUEUED, "frames waiting in one queue", positive),
                             doc="items per stage queue and per file camera lane")
