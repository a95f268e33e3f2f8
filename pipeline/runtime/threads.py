"""One thread budget for the whole process, planned from the core count and the config.

The seed's pitfall was a worker with over a hundred threads: default-sized pools of
every library stacked on each other. Here every pool is sized explicitly: each engine's
plan is resolved once (`pipeline.engines.plan`), what grows with the cameras is decided
by `Capacity`, and the plan is printed at start-up; tests compare the live thread count
against `total`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.config import Config
from pipeline.config.limits import visible_cores

log = logging.getLogger("pipeline.threads")


def plan_cores(config: Config) -> int:
    """The cores the plan may use: `runtime.threads`, at most the visible cores."""
    cores = visible_cores()
    wanted = config.runtime.threads
    if wanted and wanted > cores:
        log.warning("runtime.threads: %d asked for, %d core(s) visible: planning for %d", wanted, cores, cores)
    return min(wanted or cores, cores)


@dataclass(frozen=True)
class Capacity:
    """What the run may use for work that grows with the cameras, decided here only: the
    sink grows its workers as cameras come (configured at start or added while running)."""

    cores: int

    def sink_workers(self, cameras: int) -> int:
        """Encoding workers for this many cameras: one per camera up to half the cores
        (inference needs the rest)."""
        return max(1, min(cameras, self.cores // 2))


class PlannedEngine(Protocol):
    def threads(self) -> int: ...

    def describe(self) -> str: ...


@dataclass
class ThreadPlan:
    """Threads of the whole process: fixed ones (stages, engines) and those that come with
    each camera (its reader, its decoder's extra threads, its encoder, sink workers)."""

    cores: int
    base_threads: int                    # already running when the plan was made
    stage_threads: int = 0
    shared_workers: int = 0              # the shared CPU inference pool
    engines: dict[str, PlannedEngine] = field(default_factory=dict)
    decode_threads: int = 0              # extra FFmpeg threads of the cameras so far
    encoders: bool = True                # one encoder thread per camera
    cameras: int = 0

    def add_camera(self, decoder_threads: int) -> None:
        """A camera joins: its thread, its decoder's extra threads, its encoder."""
        self.cameras += 1
        self.decode_threads += max(0, decoder_threads - 1) if decoder_threads != 0 else self.cores

    @property
    def total(self) -> int:
        per_camera = self.cameras * (2 if self.encoders else 1) + self.decode_threads
        return (self.base_threads + self.stage_threads + self.shared_workers + per_camera
                + Capacity(self.cores).sink_workers(self.cameras) + sum(e.threads() for e in self.engines.values()))

    def describe(self) -> str:
        engines = ", ".join(f"{n}: {e.describe()}" for n, e in self.engines.items())
        return (f"thread plan for {self.cores} core(s): {self.cameras} camera thread(s), {self.decode_threads} extra "
                f"decode, {self.stage_threads} stage, {Capacity(self.cores).sink_workers(self.cameras)} sink, "
                f"{self.cameras if self.encoders else 0} encoder, {self.shared_workers} shared inference worker(s); "
                f"engines [{engines}]; {self.base_threads} already running; total <= {self.total}")
