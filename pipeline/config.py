"""YAML -> typed configuration, validated before anything starts.

Every problem is collected (not just the first) and reported with its YAML path, e.g.
`sources[1].uri: file not found: cams/b.mp4`, so a user fixes a config in one round.
Relative paths resolve against the config file's folder.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

LAYOUTS = ("yolox", "yolov5", "yolov8", "e2e", "classifier")
POLICIES = ("block", "drop_oldest")
LETTERBOX_MODES = ("top_left", "center", "stretch", "center_crop")
ENGINE_MODES = ("auto", "async", "thread")
PROVIDERS = ("cpu", "cuda", "tensorrt")
# Each stage type's options and their types: checked here, with the rest of the config,
# so every mistake is reported in the same first round.
STAGE_OPTIONS: dict[str, dict[str, type | tuple]] = {
    "detect": {"model": str},
    "track": {"high_threshold": float, "new_track_threshold": float, "match_iou": float, "low_match_iou": float,
              "max_age": int, "class_aware": bool},
    "classify": {"model": str, "classes": list, "min_size": float, "margin": float, "per_track": bool,
                 "reclassify_interval": int, "regrow": float},
    "analytics": {"cameras": dict},
    "annotate": {},
}
STAGE_TYPES = tuple(STAGE_OPTIONS)


class ConfigError(Exception):
    """All validation problems of one config, each 'yaml.path: message'."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class QueueConfig:
    size: int
    policy: str


@dataclass
class ReconnectConfig:
    initial_s: float = 0.5
    max_s: float = 8.0
    give_up_s: float = 60.0


@dataclass
class SourceConfig:
    id: str
    uri: str
    live: bool
    decoder: str | None = None
    thread_count: int = 1
    queue: QueueConfig = field(default_factory=lambda: QueueConfig(8, "block"))
    transport: str = "tcp"
    open_timeout_s: float = 5.0
    read_timeout_s: float = 5.0
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)
    max_fps: float | None = None
    stride: int = 1
    realtime: bool = False
    loop: bool = False
    options: dict[str, str] = field(default_factory=dict)  # FFmpeg demuxer/protocol options


@dataclass
class BatchingConfig:
    max_batch: int = 4
    max_wait_ms: float = 10.0
    batch_sizes: list[int] | None = None


@dataclass
class EngineConfig:
    mode: str = "auto"
    max_inflight: int | None = None  # default: workers + 1, so a batch always waits for a free worker
    workers: int | None = None
    providers: list[str] = field(default_factory=lambda: ["cpu"])
    device_id: int = 0
    intra_op_threads: int | None = None
    inter_op_threads: int = 1
    graph_optimization: str = "all"
    io_binding: bool = True
    cuda_graph: bool = False
    trt_fp16: bool = True
    trt_cache_dir: str | None = None


@dataclass
class ModelConfig:
    name: str
    path: str
    layout: str
    input_size: tuple[int, int]  # (width, height)
    color: str = "bgr"
    scale: float = 1.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    letterbox: str = "top_left"
    pad_value: int = 114
    labels: list[str] = field(default_factory=list)
    score_threshold: float = 0.3
    nms_iou: float = 0.45
    classes: list[str] | None = None
    max_detections: int = 300
    softmax: bool = True
    output: str | int | None = None  # which model output to decode (name or index); default the first
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)

    def label(self, class_id: int) -> str:
        if 0 <= class_id < len(self.labels):
            return self.labels[class_id]
        return str(class_id)


@dataclass
class StageConfig:
    type: str
    options: dict[str, Any]
    path: str  # YAML path, for errors raised while building the stage


@dataclass
class VideoOutputConfig:
    enabled: bool = True
    codec: str = "libx264"
    preset: str = "ultrafast"
    crf: int = 23
    filename: str = "{camera}.mp4"
    options: dict[str, str] = field(default_factory=dict)
    fragmented: bool | None = None  # None: fragmented (crash-safe) MP4 for live cameras, plain for files


@dataclass
class JsonlOutputConfig:
    enabled: bool = True
    filename: str = "detections.jsonl"


@dataclass
class OutputsConfig:
    dir: str = "out"
    video: VideoOutputConfig = field(default_factory=VideoOutputConfig)
    jsonl: JsonlOutputConfig = field(default_factory=JsonlOutputConfig)


@dataclass
class MetricsConfig:
    log_interval_s: float = 5.0
    prometheus_port: int | None = None
    report: str | None = None


@dataclass
class RuntimeConfig:
    threads: int | None = None  # cores the plan may use; default: all visible cores
    queue_size: int = 4


@dataclass
class Config:
    sources: list[SourceConfig]
    models: dict[str, ModelConfig]
    graph: list[StageConfig]
    outputs: OutputsConfig
    metrics: MetricsConfig
    runtime: RuntimeConfig
    base_dir: Path

    def detect_model(self) -> ModelConfig:
        """The model of the first stage: its preprocessing runs in the source threads."""
        return self.models[self.graph[0].options["model"]]

    def subset(self, camera_ids: list[str]) -> "Config":
        """The same graph for some of the cameras (one shard of a multi-machine deployment)."""
        unknown = set(camera_ids) - {s.id for s in self.sources}
        if unknown:
            raise ConfigError([f"sources: no camera with id {', '.join(sorted(unknown))}"])
        keep = [s for s in self.sources if s.id in camera_ids]
        return Config(keep, self.models, self.graph, self.outputs, self.metrics, self.runtime, self.base_dir)


class _Reader:
    """Typed field access that records problems with their YAML path instead of raising."""

    def __init__(self, base_dir: Path):
        self.base_dir = base_dir
        self.problems: list[str] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def mapping(self, value: Any, path: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(path, f"expected a mapping, got {type(value).__name__}")
            return {}
        return value

    def get(self, m: dict, key: str, path: str, kind: type | tuple, default: Any = None,
            required: bool = False, check: Callable[[Any], str | None] | None = None) -> Any:
        where = f"{path}.{key}" if path else key
        if key not in m or m[key] is None:
            if required:
                self.problem(where, "required")
            return default
        value = m[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds:
            self.problem(where, f"expected {_kind_name(kinds)}, got a boolean")
            return default
        if not isinstance(value, kinds):
            self.problem(where, f"expected {_kind_name(kinds)}, got {type(value).__name__} {value!r}")
            return default
        if check is not None:
            message = check(value)
            if message:
                self.problem(where, message)
                return default
        return value

    def choice(self, m: dict, key: str, path: str, choices: tuple, default: str) -> str:
        return self.get(m, key, path, str, default,
                        check=lambda v: None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}")

    def unknown_keys(self, m: dict, path: str, known: set[str]) -> None:
        for key in m:
            if key not in known:
                self.problem(f"{path}.{key}" if path else str(key), f"unknown key (known: {', '.join(sorted(known))})")

    def file(self, m: dict, key: str, path: str, required: bool = True) -> str | None:
        value = self.get(m, key, path, str, required=required)
        if value is None:
            return None
        resolved = resolve_path(self.base_dir, value)
        if not os.path.isfile(resolved):
            self.problem(f"{path}.{key}", f"file not found: {value}")
            return None
        return resolved


def _kind_name(kinds: tuple) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true/false", list: "a list", dict: "a mapping"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _positive(v: float) -> str | None:
    return None if v > 0 else f"must be > 0, got {v}"


def _non_negative(v: float) -> str | None:
    return None if v >= 0 else f"must be >= 0, got {v}"


def resolve_path(base_dir: Path, value: str) -> str:
    p = Path(os.path.expanduser(value))
    return str(p if p.is_absolute() else (base_dir / p))


def is_url(uri: str) -> bool:
    return "://" in uri


def _read_labels(r: _Reader, value: Any, path: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    if not isinstance(value, str):
        r.problem(path, "expected a file path or a list of names")
        return []
    resolved = resolve_path(r.base_dir, value)
    if not os.path.isfile(resolved):
        r.problem(path, f"file not found: {value}")
        return []
    text = Path(resolved).read_text(encoding="utf-8")
    if resolved.endswith(".json"):
        import json

        data = json.loads(text)
        if isinstance(data, dict):
            return [str(data[k]) for k in sorted(data, key=lambda k: int(k))]
        return [str(v) for v in data]
    return [line.strip() for line in text.splitlines() if line.strip()]


def _size(r: _Reader, m: dict, path: str) -> tuple[int, int]:
    value = m.get("input_size")
    where = f"{path}.input_size"
    if value is None:
        r.problem(where, "required (an integer, or [width, height])")
        return (0, 0)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return (value, value)
    if (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        return (value[0], value[1])
    r.problem(where, f"expected a positive integer or [width, height], got {value!r}")
    return (0, 0)


def _triple(r: _Reader, m: dict, key: str, path: str, default: tuple) -> tuple[float, float, float]:
    value = m.get(key)
    if value is None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value),) * 3
    if isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value):
        return tuple(float(v) for v in value)  # type: ignore[return-value]
    r.problem(f"{path}.{key}", f"expected a number or a list of 3 numbers, got {value!r}")
    return default


def _parse_source(r: _Reader, m: Any, path: str, seen: set[str], queue_size: int) -> SourceConfig | None:
    m = r.mapping(m, path)
    r.unknown_keys(m, path, {"id", "uri", "live", "decoder", "thread_count", "queue", "transport", "open_timeout_s",
                             "read_timeout_s", "reconnect", "max_fps", "stride", "realtime", "loop", "options"})
    sid = r.get(m, "id", path, str, required=True)
    if sid is not None:
        if sid in seen:
            r.problem(f"{path}.id", f"duplicate camera id {sid!r}")
        seen.add(sid)
    uri = r.get(m, "uri", path, str, required=True)
    live_default = bool(uri) and is_url(uri) and not uri.startswith("file://")
    live = r.get(m, "live", path, bool, live_default)
    if uri is not None and not is_url(uri):
        resolved = resolve_path(r.base_dir, uri)
        if not os.path.isfile(resolved):
            r.problem(f"{path}.uri", f"file not found: {uri}")
        uri = resolved
    qm = r.mapping(m.get("queue"), f"{path}.queue")
    r.unknown_keys(qm, f"{path}.queue", {"size", "policy"})
    queue = QueueConfig(
        size=r.get(qm, "size", f"{path}.queue", int, 2 if live else queue_size, check=_positive),
        policy=r.choice(qm, "policy", f"{path}.queue", POLICIES, "drop_oldest" if live else "block"),
    )
    rm = r.mapping(m.get("reconnect"), f"{path}.reconnect")
    r.unknown_keys(rm, f"{path}.reconnect", {"initial_s", "max_s", "give_up_s"})
    reconnect = ReconnectConfig(
        initial_s=r.get(rm, "initial_s", f"{path}.reconnect", float, 0.5, check=_positive),
        max_s=r.get(rm, "max_s", f"{path}.reconnect", float, 8.0, check=_positive),
        give_up_s=r.get(rm, "give_up_s", f"{path}.reconnect", float, 60.0, check=_non_negative),
    )
    if sid is None or uri is None:
        return None
    return SourceConfig(
        id=sid, uri=uri, live=live,
        decoder=r.get(m, "decoder", path, str),
        thread_count=r.get(m, "thread_count", path, int, 1, check=_non_negative),
        queue=queue,
        transport=r.choice(m, "transport", path, ("tcp", "udp"), "tcp"),
        open_timeout_s=r.get(m, "open_timeout_s", path, float, 5.0, check=_positive),
        read_timeout_s=r.get(m, "read_timeout_s", path, float, 5.0, check=_positive),
        reconnect=reconnect,
        max_fps=r.get(m, "max_fps", path, float, check=_positive),
        stride=r.get(m, "stride", path, int, 1, check=_positive),
        realtime=r.get(m, "realtime", path, bool, False),
        loop=r.get(m, "loop", path, bool, False),
        options={str(k): str(v) for k, v in r.mapping(m.get("options"), f"{path}.options").items()},
    )


def _parse_model(r: _Reader, name: str, m: Any, path: str) -> ModelConfig | None:
    m = r.mapping(m, path)
    r.unknown_keys(m, path, {"path", "layout", "input_size", "color", "scale", "mean", "std", "letterbox",
                             "pad_value", "labels", "score_threshold", "nms_iou", "classes", "max_detections",
                             "softmax", "output", "batching", "engine"})
    model_path = r.file(m, "path", path)
    layout = r.choice(m, "layout", path, LAYOUTS, "yolox") if "layout" in m else None
    if layout is None:
        r.problem(f"{path}.layout", f"required (one of {', '.join(LAYOUTS)})")
    size = _size(r, m, path)
    labels = _read_labels(r, m.get("labels"), f"{path}.labels")
    classes = r.get(m, "classes", path, list)
    if classes is not None and labels:
        for i, c in enumerate(classes):
            if str(c) not in labels:
                r.problem(f"{path}.classes[{i}]", f"unknown class {c!r} (not in labels)")
    bm = r.mapping(m.get("batching"), f"{path}.batching")
    r.unknown_keys(bm, f"{path}.batching", {"max_batch", "max_wait_ms", "batch_sizes"})
    max_batch = r.get(bm, "max_batch", f"{path}.batching", int, 4, check=_positive)
    sizes = r.get(bm, "batch_sizes", f"{path}.batching", list)
    if sizes is not None:
        if not sizes or not all(isinstance(s, int) and s > 0 for s in sizes):
            r.problem(f"{path}.batching.batch_sizes", "expected a list of positive integers")
            sizes = None
        elif max(sizes) < max_batch:
            r.problem(f"{path}.batching.batch_sizes", f"largest size {max(sizes)} is below max_batch {max_batch}")
            sizes = None
        else:
            sizes = sorted(set(sizes))
    batching = BatchingConfig(max_batch, r.get(bm, "max_wait_ms", f"{path}.batching", float, 10.0,
                                                check=_non_negative), sizes)
    em = r.mapping(m.get("engine"), f"{path}.engine")
    ep = f"{path}.engine"
    r.unknown_keys(em, ep, {"mode", "max_inflight", "workers", "providers", "device_id", "intra_op_threads", "inter_op_threads",
                            "graph_optimization", "io_binding", "cuda_graph", "trt_fp16", "trt_cache_dir"})
    providers = r.get(em, "providers", ep, list, ["cpu"])
    for i, p in enumerate(providers):
        if p not in PROVIDERS:
            r.problem(f"{ep}.providers[{i}]", f"must be one of {', '.join(PROVIDERS)}, got {p!r}")
    trt_cache = r.get(em, "trt_cache_dir", ep, str)
    engine = EngineConfig(
        mode=r.choice(em, "mode", ep, ENGINE_MODES, "auto"),
        max_inflight=r.get(em, "max_inflight", ep, int, check=_positive),
        workers=r.get(em, "workers", ep, int, check=_positive),
        providers=[p for p in providers if p in PROVIDERS] or ["cpu"],
        device_id=r.get(em, "device_id", ep, int, 0, check=_non_negative),
        intra_op_threads=r.get(em, "intra_op_threads", ep, int, check=_positive),
        inter_op_threads=r.get(em, "inter_op_threads", ep, int, 1, check=_positive),
        graph_optimization=r.choice(em, "graph_optimization", ep, ("disable", "basic", "extended", "all"), "all"),
        io_binding=r.get(em, "io_binding", ep, bool, True),
        cuda_graph=r.get(em, "cuda_graph", ep, bool, False),
        trt_fp16=r.get(em, "trt_fp16", ep, bool, True),
        trt_cache_dir=resolve_path(r.base_dir, trt_cache) if trt_cache else None,
    )
    default_letterbox = "stretch" if layout == "classifier" else "top_left"
    config = ModelConfig(
        name=name, path=model_path or "", layout=layout or "yolox", input_size=size,
        color=r.choice(m, "color", path, ("bgr", "rgb"), "bgr"),
        scale=r.get(m, "scale", path, float, 1.0),
        mean=_triple(r, m, "mean", path, (0.0, 0.0, 0.0)),
        std=_triple(r, m, "std", path, (1.0, 1.0, 1.0)),
        letterbox=r.choice(m, "letterbox", path, LETTERBOX_MODES, default_letterbox),
        pad_value=r.get(m, "pad_value", path, int, 114),
        labels=labels,
        score_threshold=r.get(m, "score_threshold", path, float, 0.3,
                              check=lambda v: None if 0 <= v <= 1 else f"must be within 0..1, got {v}"),
        nms_iou=r.get(m, "nms_iou", path, float, 0.45,
                      check=lambda v: None if 0 < v <= 1 else f"must be within 0..1, got {v}"),
        classes=[str(c) for c in classes] if classes is not None else None,
        max_detections=r.get(m, "max_detections", path, int, 300, check=_positive),
        softmax=r.get(m, "softmax", path, bool, True),
        output=r.get(m, "output", path, (str, int)),
        batching=batching, engine=engine,
    )
    if any(s == 0 for s in config.std):
        r.problem(f"{path}.std", "must not contain 0")
    return config


def _parse_graph(r: _Reader, value: Any, models: dict[str, ModelConfig]) -> list[StageConfig]:
    if not isinstance(value, list) or not value:
        r.problem("graph", "required: a list of stages, the first one a detect stage")
        return []
    stages: list[StageConfig] = []
    for i, entry in enumerate(value):
        path = f"graph[{i}]"
        if isinstance(entry, str):
            entry = {entry: {}}
        if not isinstance(entry, dict) or len(entry) != 1:
            r.problem(path, "expected one stage: '- type: {options}'")
            continue
        (stype, options), = entry.items()
        options = r.mapping(options, f"{path}.{stype}")
        if stype not in STAGE_TYPES:
            r.problem(path, f"unknown stage type {stype!r} (known: {', '.join(STAGE_TYPES)})")
            continue
        schema = STAGE_OPTIONS[stype]
        r.unknown_keys(options, f"{path}.{stype}", set(schema))
        for key, kind in schema.items():
            if key != "model":
                r.get(options, key, f"{path}.{stype}", kind)
        if stype in ("detect", "classify"):
            model = options.get("model")
            if model not in models:
                r.problem(f"{path}.{stype}.model", f"unknown model {model!r} (models: {', '.join(models) or 'none'})")
            elif stype == "detect" and models[model].layout == "classifier":
                r.problem(f"{path}.{stype}.model", f"model {model!r} has layout classifier; detect needs a detector")
            elif stype == "classify" and models[model].layout != "classifier":
                r.problem(f"{path}.{stype}.model", f"model {model!r} is not a classifier (layout: classifier)")
        stages.append(StageConfig(stype, options, f"{path}.{stype}"))
    if stages and stages[0].type != "detect":
        r.problem("graph[0]", "the first stage must be 'detect'")
    if stages and stages[0].type == "detect" and stages[0].options.get("model") in models:
        labels = models[stages[0].options["model"]].labels
        for sc in stages:
            for i, c in enumerate(sc.options.get("classes") or [] if sc.type == "classify" else []):
                if labels and c not in labels:
                    r.problem(f"{sc.path}.classes[{i}]", f"unknown detector class {c!r}")
    types = [s.type for s in stages]
    for i, sc in enumerate(stages):
        needs_track = sc.type == "analytics" or (sc.type == "classify" and sc.options.get("per_track"))
        if needs_track and "track" not in types[:i]:
            r.problem(sc.path, "needs a track stage before it (it works on track ids)")
    return stages


def parse_config(data: Any, base_dir: Path) -> Config:
    r = _Reader(base_dir)
    top = r.mapping(data, "(top level)")
    r.unknown_keys(top, "", {"sources", "models", "graph", "outputs", "metrics", "runtime"})
    rt = r.mapping(top.get("runtime"), "runtime")
    r.unknown_keys(rt, "runtime", {"threads", "queue_size"})
    runtime = RuntimeConfig(threads=r.get(rt, "threads", "runtime", int, check=_positive),
                            queue_size=r.get(rt, "queue_size", "runtime", int, 4, check=_positive))
    raw_sources = top.get("sources")
    sources: list[SourceConfig] = []
    if not isinstance(raw_sources, list) or not raw_sources:
        r.problem("sources", "required: a list of cameras with id and uri")
    else:
        seen: set[str] = set()
        for i, s in enumerate(raw_sources):
            parsed = _parse_source(r, s, f"sources[{i}]", seen, runtime.queue_size)
            if parsed:
                sources.append(parsed)
    models: dict[str, ModelConfig] = {}
    raw_models = r.mapping(top.get("models"), "models")
    if not raw_models:
        r.problem("models", "required: a mapping of model name -> model")
    for name, m in raw_models.items():
        parsed_model = _parse_model(r, str(name), m, f"models.{name}")
        if parsed_model:
            models[str(name)] = parsed_model
    graph = _parse_graph(r, top.get("graph"), models)
    om = r.mapping(top.get("outputs"), "outputs")
    r.unknown_keys(om, "outputs", {"dir", "video", "jsonl"})
    vm = r.mapping(om.get("video"), "outputs.video")
    r.unknown_keys(vm, "outputs.video", {"enabled", "codec", "preset", "crf", "filename", "options", "fragmented"})
    jm = r.mapping(om.get("jsonl"), "outputs.jsonl")
    r.unknown_keys(jm, "outputs.jsonl", {"enabled", "filename"})
    out_dir = r.get(om, "dir", "outputs", str, "out")
    outputs = OutputsConfig(
        dir=resolve_path(base_dir, out_dir),
        video=VideoOutputConfig(
            enabled=r.get(vm, "enabled", "outputs.video", bool, True),
            codec=r.get(vm, "codec", "outputs.video", str, "libx264"),
            preset=r.get(vm, "preset", "outputs.video", str, "ultrafast"),
            crf=r.get(vm, "crf", "outputs.video", int, 23,
                      check=lambda v: None if 0 <= v <= 63 else f"must be within 0..63, got {v}"),
            filename=r.get(vm, "filename", "outputs.video", str, "{camera}.mp4"),
            options={str(k): str(v) for k, v in r.mapping(vm.get("options"), "outputs.video.options").items()},
            fragmented=r.get(vm, "fragmented", "outputs.video", bool),
        ),
        jsonl=JsonlOutputConfig(
            enabled=r.get(jm, "enabled", "outputs.jsonl", bool, True),
            filename=r.get(jm, "filename", "outputs.jsonl", str, "detections.jsonl"),
        ),
    )
    if "{camera}" not in outputs.video.filename:
        r.problem("outputs.video.filename", "must contain {camera}: one video file per camera")
    mm = r.mapping(top.get("metrics"), "metrics")
    r.unknown_keys(mm, "metrics", {"log_interval_s", "prometheus_port", "report"})
    report = r.get(mm, "report", "metrics", str)
    metrics = MetricsConfig(
        log_interval_s=r.get(mm, "log_interval_s", "metrics", float, 5.0, check=_positive),
        prometheus_port=r.get(mm, "prometheus_port", "metrics", int,
                              check=lambda v: None if 0 <= v < 65536 else f"not a port: {v}"),
        report=resolve_path(base_dir, report) if report else None,
    )
    if r.problems:
        raise ConfigError(r.problems)
    return Config(sources, models, graph, outputs, metrics, runtime, base_dir)


def load_config(path: str | os.PathLike) -> Config:
    p = Path(path)
    if not p.is_file():
        raise ConfigError([f"{path}: config file not found"])
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError([f"{path}:{where}: invalid YAML: {problem}"]) from None
    return parse_config(data, p.resolve().parent)
