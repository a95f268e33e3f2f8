"""YAML -> typed configuration, validated before anything starts.

Every problem is collected (not just the first) and reported with its YAML path, e.g.
`sources[1].uri: file not found: cams/b.mp4`, so a user fixes a config in one round.
Relative paths resolve against the config file's folder. Sections live in their own
modules (`sources`, `models`, `stages`, `outputs`); this module ties them together and
checks what spans sections, such as every output path being unique and never an input.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from pipeline.config.limits import camera_problems, camera_threads
from pipeline.config.models import LAYOUTS, BatchingConfig, EngineConfig, ModelConfig
from pipeline.config.outputs import (JsonlOutputConfig, MetricsConfig, OutputsConfig, RuntimeConfig,
                                     VideoOutputConfig)
from pipeline.config.schema import ConfigError, Reader, is_url, resolve_path
from pipeline.config.sources import MotionConfig, QueueConfig, ReconnectConfig, SourceConfig
from pipeline.config.stages import (STAGE_SPECS, AnalyticsSpec, AnnotateSpec, ClassifySpec, DetectSpec, StageSpec,
                                    TrackSpec, entry_stage, read_graph)

__all__ = ["Config", "ConfigError", "SourceConfig", "MotionConfig", "QueueConfig", "ReconnectConfig", "ModelConfig",
           "BatchingConfig", "EngineConfig", "OutputsConfig", "VideoOutputConfig", "JsonlOutputConfig", "MetricsConfig",
           "RuntimeConfig", "StageSpec", "DetectSpec", "TrackSpec", "ClassifySpec", "AnalyticsSpec", "AnnotateSpec",
           "STAGE_SPECS", "LAYOUTS", "entry_stage", "load_config", "parse_config", "parse_source", "read_config",
           "is_url", "resolve_path", "output_path_problems", "cameras_problem"]


@dataclass
class Config:
    sources: list[SourceConfig]
    models: dict[str, ModelConfig]
    graph: list[StageSpec]
    outputs: OutputsConfig
    metrics: MetricsConfig
    runtime: RuntimeConfig
    base_dir: Path

    @property
    def detector(self) -> ModelConfig:
        """The model of the entry stage: its preprocessing runs in the source threads."""
        entry = entry_stage(self.graph)
        assert entry is not None, "read_graph refuses a graph without its entry stage"
        return self.models[entry.model]

    def used_models(self) -> list[str]:
        return sorted({s.model for s in self.graph if isinstance(s, (DetectSpec, ClassifySpec)) and s.model})

    def subset(self, camera_ids: list[str]) -> "Config":
        """The same graph for some of the cameras (one shard of a multi-machine deployment);
        per-camera settings of the others are left out."""
        unknown = [c for c in camera_ids if c not in {s.id for s in self.sources}]
        if unknown:
            raise ConfigError([f"--cameras: no camera with id {', '.join(unknown)} "
                               f"(cameras: {', '.join(s.id for s in self.sources)})"])
        keep = [s for s in self.sources if s.id in camera_ids]
        graph = [s.for_cameras(camera_ids) if isinstance(s, (AnalyticsSpec, DetectSpec)) else s for s in self.graph]
        return replace(self, sources=keep, graph=graph)

    def with_output_dir(self, path: str) -> "Config":
        return replace(self, outputs=replace(self.outputs, dir=os.path.abspath(path)))

    def with_report(self, path: str) -> "Config":
        return replace(self, metrics=replace(self.metrics, report=os.path.abspath(path)))


def read_config(data: Any, base_dir: Path) -> tuple[Config, list[str]]:
    """The config as far as it could be read, and every problem found (empty: all good).
    Fields with problems hold their defaults (None where required)."""
    r = Reader(base_dir)
    top = r.mapping(data, "")
    known = {"sources", "models", "graph", "outputs", "metrics", "runtime"}
    for key in top:
        if key not in known:
            r.problem(str(key), f"unknown key (known: {', '.join(sorted(known))})")
    runtime = r.record(RuntimeConfig, top.get("runtime"), "runtime")
    sources: list[SourceConfig] = []
    raw_sources = top.get("sources")
    if not isinstance(raw_sources, list) or not raw_sources:
        r.problem("sources", "required: a list of cameras with id and uri")
    else:
        seen: set[str] = set()
        for i, raw in enumerate(raw_sources):
            s = r.record(SourceConfig, raw, f"sources[{i}]")
            if s.id is not None:
                if s.id in seen:
                    r.problem(f"sources[{i}].id", f"duplicate camera id {s.id!r}")
                seen.add(s.id)
            s.queue = s.resolved_queue()
            sources.append(s)
    models: dict[str, ModelConfig] = {}
    raw_models = r.mapping(top.get("models"), "models")
    if not raw_models:
        r.problem("models", "required: a mapping of model name -> model")
    for name, raw in raw_models.items():
        models[str(name)] = r.record(ModelConfig, raw, f"models.{name}", {"name": str(name)})
    graph = read_graph(r, top.get("graph"), models, [s.id for s in sources if s.id])
    outputs = r.record(OutputsConfig, top.get("outputs"), "outputs")
    metrics = r.record(MetricsConfig, top.get("metrics"), "metrics")
    config = Config(sources, models, graph, outputs, metrics, runtime, base_dir)
    if not r.problems:
        r.problems += output_path_problems(config)
    return config, r.problems


def cameras_problem(sources: list[SourceConfig], outputs: OutputsConfig) -> str | None:
    """Why these cameras cannot run together in one process on this machine (None: they
    can): too many for its memory, or too many threads for its system (see
    `config.limits`). Checked where a process takes its cameras (a cluster spreads a
    config's cameras over its hosts, each checking its own)."""
    clips = outputs.events.clips
    return camera_problems(len(sources), sum(camera_threads(s.thread_count) for s in sources),
                           int(clips.max_mb * 1e6) if clips is not None else 0)


def parse_source(data: Any, base_dir: Path, where: str = "source") -> SourceConfig:
    """One camera as a `sources[]` entry of the YAML (a camera added while running, over
    HTTP or `pipeline cluster add`), checked like one; every problem with its path."""
    r = Reader(base_dir)
    if not isinstance(data, dict):
        r.problem(where, f"expected a mapping with id and uri, got {type(data).__name__}")
        raise ConfigError(r.problems)
    source = r.record(SourceConfig, data, where)
    if r.problems:
        raise ConfigError(r.problems)
    source.queue = source.resolved_queue()
    return source


def parse_config(data: Any, base_dir: Path) -> Config:
    config, problems = read_config(data, base_dir)
    if problems:
        raise ConfigError(problems)
    return config


def load_yaml(path: str | os.PathLike) -> Any:
    p = Path(path)
    if not p.is_file():
        raise ConfigError([f"{path}: config file not found"])
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not a text file"]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError([f"{path}:{where}: invalid YAML: {problem}"]) from None


def load_config(path: str | os.PathLike) -> Config:
    return parse_config(load_yaml(path), Path(path).resolve().parent)


def _recording_claims(config: Config, claim) -> list[str]:
    """The cameras' recordings: their time-named files must share no name with the videos'
    or the JSON lines' segments; a camera analysed on its `detect_uri` must be recorded
    (its `uri` is read for nothing else)."""
    out = config.outputs
    recorded = [(i, s, out.record_for(s.record)) for i, s in enumerate(config.sources) if s.id]
    problems = [f"sources[{i}].detect_uri: the camera's uri is only recorded: enable its recording "
                f"(outputs.record.enabled or sources[{i}].record)" for i, s, rec in recorded
                if s.detect_uri and not rec.enabled]
    if not any(rec.enabled for _, _, rec in recorded):
        return problems
    per_camera_jsonl = "{camera}" in out.jsonl.filename
    if out.jsonl.enabled and not per_camera_jsonl:
        claim(out.jsonl_path("", "{start}"), "outputs.jsonl.filename", "the JSON lines segments")
    for i, s, rec in recorded:
        if out.video.enabled:
            claim(out.video_path(s.id, "{start}"), f"sources[{i}].id", f"camera {s.id!r}'s video segments")
        if out.jsonl.enabled and per_camera_jsonl:
            claim(out.jsonl_path(s.id, "{start}"), "outputs.jsonl.filename", f"camera {s.id!r}'s JSON lines segments")
    for i, s, rec in recorded:
        if rec.enabled:
            claim(out.record_path(s.id, rec.filename), f"sources[{i}].record.filename",
                  f"camera {s.id!r}'s recording segments")
    return problems


def _kept_recordings_problems(config: Config) -> list[str]:
    """`recordings_kept: motion` removes old recordings that had no motion: a recorded
    camera whose motion is not measured (its detect stage without `motion`) has none in
    any segment, and would lose every one of them, objects or not."""
    out, entry = config.outputs, entry_stage(config.graph)
    if out.store.recordings_kept != "motion" or entry is None or not out.store.enabled:
        return []
    return [f"outputs.store.recordings_kept: motion keeps only recordings with motion, and camera {s.id!r} "
            f"(sources[{i}]) is recorded without its motion measured: set {entry.path}.motion to true (for a "
            f"camera of the config file, {entry.path}.cameras.{s.id}.motion will do), or keep its recordings by "
            "`active_objects`"
            for i, s in enumerate(config.sources)
            if s.id and out.record_for(s.record).enabled and not entry.rate(s.id).motion]


def output_path_problems(config: Config) -> list[str]:
    """Every file the run will write must be its own, inside `outputs.dir`, and never one
    of its inputs: a collision silently destroys a file (two writers, or an input video
    overwritten by its own output); nor may the store remove a recorded camera's files
    by an activity it does not measure. Checked again for each camera added while running."""
    out = config.outputs
    root = os.path.realpath(out.dir)
    problems: list[str] = []
    owners: dict[str, tuple[str, str]] = {}  # real path -> (YAML path that makes it, description)

    def claim(path: str, where: str, what: str) -> None:
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root:
            problems.append(f"{where}: {what} {path} would be written outside outputs.dir {out.dir}")
            return
        if os.path.isdir(real):
            problems.append(f"{where}: {what} {path} is a folder")
            return
        if real in owners:
            other_where, other_what = owners[real]
            problems.append(f"{where}: {what} {path} is also {other_what} ({other_where}): one would destroy the other")
            return
        owners[real] = (where, what)

    cameras = [s for s in config.sources if s.id]
    segments: list[tuple[re.Pattern, str, str]] = []
    if out.video.enabled:
        for i, s in enumerate(cameras):
            path = out.video_path(s.id)
            claim(path, f"sources[{i}].id", f"camera {s.id!r}'s video")
            stem, ext = os.path.splitext(os.path.realpath(path))
            segments.append((re.compile(re.escape(stem) + r"\.part\d+" + re.escape(ext)), f"sources[{i}].id", s.id))
    if out.jsonl.enabled:
        if "{camera}" in out.jsonl.filename:
            for i, s in enumerate(cameras):
                claim(out.jsonl_path(s.id), "outputs.jsonl.filename", f"camera {s.id!r}'s JSON lines")
        else:
            claim(os.path.join(out.dir, out.jsonl.filename), "outputs.jsonl.filename", "the JSON lines file")
    problems += _recording_claims(config, claim) + _kept_recordings_problems(config)
    if config.metrics.report:
        real = os.path.realpath(config.metrics.report)
        if real in owners:
            problems.append(f"metrics.report: {config.metrics.report} is also {owners[real][1]}")
    for real, (where, what) in list(owners.items()):
        for pattern, _, cam in segments:
            if pattern.fullmatch(real):
                problems.append(f"{where}: {what} {real} has the name of a later segment of camera {cam!r}'s video "
                                f"(written after a resolution change): rename one of them")
    inputs = [(f"sources[{i}].uri", s.uri) for i, s in enumerate(config.sources) if s.uri and not is_url(s.uri)]
    inputs += [(f"models.{n}.path", m.path) for n, m in config.models.items() if m.path]
    for where, path in inputs:
        real = os.path.realpath(path)
        hit = owners.get(real) or next(((w, f"a later segment of camera {c!r}'s video") for p, w, c in segments
                                        if p.fullmatch(real)), None)
        if hit:
            problems.append(f"{where}: {path} would be overwritten: it is also {hit[1]} ({hit[0]})")
    return problems
