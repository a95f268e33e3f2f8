"""Cameras added and removed while running, from a mapping written like a `sources[]`
entry of the YAML: the one code path behind the HTTP API (`POST /api/cameras`, `DELETE
/api/cameras/<id>`) and `pipeline cluster add|remove`; and the reload of the config file
(`POST /api/reload`), where the run has one to read (`reload.Reloader`).

Mistakes are reported like `validate` reports them (`source.uri: file not found: ...`,
every problem in one round, `ConfigError`); an id that is running is `CameraInUse`; an
id that is not, `UnknownCamera`.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

from pipeline.config import Config, ConfigError, SourceConfig, output_path_problems, parse_source
from pipeline.config.secrets import register_source
from pipeline.errors import CameraInUse, UnknownCamera
from pipeline.redact import redact

log = logging.getLogger("pipeline.reload")


@dataclass
class Reloaded:
    """One reload's outcome (`reload.Reloader`): what took effect, what waits for a restart
    (YAML paths), and the new file's problems (then nothing changed)."""

    applied: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def log(self) -> None:
        for problem in self.problems:
            log.error("reload: %s", redact(problem))
        if self.problems:
            log.error("reload refused: the config file has %d problem(s); nothing changed", len(self.problems))
            return
        for line in self.applied:
            log.info("reload: %s", line)
        for path in self.restart:
            log.warning("reload: %s changed: needs a restart (not applied)", path)
        if not self.applied and not self.restart:
            log.info("reload: nothing changed")


class Runs(Protocol):
    """What runs the cameras: a `Pipeline`, or the cluster's driver."""

    def add_camera(self, source: SourceConfig) -> None: ...

    def remove_camera(self, camera: str) -> None: ...

    def cameras(self) -> list[str]: ...


class CameraControl:
    """Requests come concurrently (one HTTP handler thread each): a camera's check and its
    start happen under one lock, so of several adds of one id exactly one starts it and
    the others are told it is running (`CameraInUse`)."""

    def __init__(self, runs: Runs, config: Config):
        self.runs = runs
        self.config = config
        self.reload: Callable[[], Reloaded] | None = None  # set by a run that reads a config file (not --cluster)
        self._lock = threading.Lock()
        # cameras added so far (removed ones too: their files stay); replaced whole, read without the lock
        self._added: dict[str, SourceConfig] = {}

    def add(self, data: Any, where: str = "source") -> SourceConfig:
        """Start the camera `data` describes, once its files collide with none of the
        configured cameras' nor of those added before it (`output_path_problems`, the check
        `validate` makes of a config)."""
        source = parse_source(data, self.config.base_dir, where)
        register_source(source)  # its URL's password is masked in every answer and log from now on
        with self._lock:
            if source.id in self.runs.cameras():
                raise CameraInUse(f"{where}.id: camera {source.id} is already running")
            added = {**{s.id: s for s in self.config.sources}, **self._added}
            others = [s for s in added.values() if s.id != source.id]
            problems = output_path_problems(replace(self.config, sources=[*others, source]))
            if problems:
                raise ConfigError([p.replace(f"sources[{len(others)}]", where) for p in problems])
            self.runs.add_camera(source)
            self._added = {**self._added, source.id: source}
        return source

    def added(self) -> list[SourceConfig]:
        """The cameras added so far (removed ones too: their files stay), without waiting
        for an add under way (it may wait for a host)."""
        return list(self._added.values())

    def remove(self, camera: str) -> None:
        with self._lock:
            if camera not in self.runs.cameras():
                raise UnknownCamera(f"camera {camera} is not running")
            self.runs.remove_camera(camera)
