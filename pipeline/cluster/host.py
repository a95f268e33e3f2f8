"""One host's share of the cameras: the body of the pipeline actor that runs on each GPU
(or group of CPU cores) of a cluster.

It builds the graph once (models opened and checked, engines profiled) with no camera,
then runs the cameras the driver places on it, added and removed while it runs; a model
that fails its checks here is refused (`ready` says why) and the run does not start. Frames never leave
it: it decodes, infers and writes its own cameras' outputs (on storage every host sees).
What it reports is `HostStatus`. The actor takes calls concurrently (status polls are
answered while a drain is under way).
"""
from __future__ import annotations

import os
import socket
import threading
from dataclasses import replace

from pipeline.cluster.status import HostStatus
from pipeline.config import Config, SourceConfig
from pipeline.config.secrets import register_config, register_source
from pipeline.errors import PipelineError
from pipeline.frames import Resume
from pipeline.graph import Pipeline
from pipeline.metrics.registry import recent_latency


class PipelineHost:
    def __init__(self, name: str, config: Config, cores: int, max_frames: int | None = None):
        # the driver's checked config; this host's share of the machine is `cores`
        register_config(config)  # this process masks the config's secrets too (states, errors, events)
        config = replace(config, sources=[], runtime=replace(config.runtime, threads=cores))
        self.name = name
        self.node = socket.gethostname()
        self._closing = threading.Lock()
        self._closed = False
        self.refused: list[str] = []
        try:
            self.pipeline = Pipeline(config, max_frames=max_frames)
        except PipelineError as e:
            self.refused = e.problems
            return
        self.pipeline.start()

    def ready(self) -> dict:
        """Who it is, or why it cannot run (`refused`: the problems of its models)."""
        web = None if self.refused or self.pipeline.side.web is None else self.pipeline.side.web.port
        return {"host": self.name, "node": self.node, "pid": os.getpid(), "refused": self.refused, "web": web}

    def add(self, source: SourceConfig, resume: Resume) -> None:
        register_source(source)  # a camera added while running brings its own
        self.pipeline.add_camera(source, resume)

    def remove(self, camera: str) -> None:
        self.pipeline.remove_camera(camera)

    def status(self) -> HostStatus:
        """What the driver merges. The cameras' latencies over the recent window go as a
        histogram: the run's recent P99 is the hosts' histograms merged (P99s do not add up)."""
        web, metrics = self.pipeline.side.web, self.pipeline.metrics
        recent = recent_latency([c.recent for c in list(metrics.cameras.values())], metrics.clock())
        return HostStatus.of(self.name, self.node, self.pipeline.snapshot(), metrics.total_latency(), recent,
                             self.pipeline.cameras(), self.pipeline.outputs_failed,
                             web.live_view() if web is not None else None)

    def stop(self, abort: bool = False) -> HostStatus:
        """Stop every camera, drain (or abort), finalise the outputs; the last status. An
        abort that comes while a drain is under way (the actor takes calls concurrently)
        wakes it; the pipeline is closed once."""
        self.pipeline.stop(abort=abort)
        with self._closing:
            if not self._closed:
                if not abort:
                    self.pipeline.wait(60)
                self.pipeline.close(timeout=10 if abort else 60)
                self._closed = True
        return self.status()
