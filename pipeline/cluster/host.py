"""One host's share of the cameras: the body of the pipeline actor that runs on each GPU
(or group of CPU cores) of a cluster.

It builds the graph once (models loaded, engines profiled) with no camera, then runs the
cameras the driver places on it, added and removed while it runs. Frames never leave
it: it decodes, infers and writes its own cameras' outputs (on storage every host sees).
What it reports is small and independent of the frame rate: per camera counters and
states, and one latency histogram for the host.
"""
from __future__ import annotations

import os
import socket
from dataclasses import replace

from pipeline.config import Config, SourceConfig
from pipeline.frames import Resume
from pipeline.graph import Pipeline


class PipelineHost:
    def __init__(self, name: str, config: Config, cores: int, max_frames: int | None = None):
        # the driver's checked config; this host's share of the machine is `cores`
        config = replace(config, sources=[], runtime=replace(config.runtime, threads=cores))
        self.name = name
        self.node = socket.gethostname()
        self.pipeline = Pipeline(config, max_frames=max_frames)
        self.pipeline.start()

    def ready(self) -> dict:
        return {"host": self.name, "node": self.node, "pid": os.getpid()}

    def add(self, source: SourceConfig, resume: Resume) -> None:
        self.pipeline.add_camera(source, resume)

    def remove(self, camera: str) -> None:
        self.pipeline.remove_camera(camera)

    def status(self) -> dict:
        """Counters and states of its cameras (a summary of the metrics snapshot), which
        cameras still have open outputs, and the host's latency histogram (to merge)."""
        snap = self.pipeline.snapshot()
        latency = self.pipeline.metrics.total_latency()
        return {"host": self.name, "node": self.node, "cameras": snap["cameras"], "open": self.pipeline.cameras(),
                "latency_counts": latency.counts.tolist(), "latency_max": latency.max,
                "latency_total": latency.total, "engines": snap["engines"], "cpu_percent": snap["cpu_percent"],
                "threads": snap["threads"]}

    def stop(self, abort: bool = False) -> dict:
        """Stop every camera, drain (or abort), finalise the outputs; the last status."""
        self.pipeline.stop(abort=abort)
        self.pipeline.wait(60)
        status = self.status()
        self.pipeline.close(timeout=10 if abort else 60)
        return status
