"""The cluster driver: places cameras on pipeline hosts (Ray actors), watches their
health, moves the cameras of a host that dies to the survivors, and merges the hosts'
metrics into one summary and one Prometheus endpoint.

Only control traffic crosses machines: placement decisions, camera add/remove, and one
small status per host per poll (per-camera counters and one latency histogram). The
driver's work grows with cameras and hosts, never with frames.

Ray does what it is good at: scheduling hosts onto nodes with the resources they ask for
(a GPU each, or a number of CPUs), spreading them, and telling the driver when an actor
is gone. Cameras are placed by this driver, which knows their cost (`placement`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pipeline.cluster.placement import CameraLoad, CostModel, Host, place
from pipeline.cluster.resume import resume_point
from pipeline.config import Config, SourceConfig, is_url
from pipeline.frames import Resume
from pipeline.metrics.histogram import Histogram

log = logging.getLogger("pipeline.cluster")

DONE_STATES = ("ended", "failed")


@dataclass
class HostState:
    name: str
    handle: Any                      # the actor (or a stand-in with the same methods)
    capacity: float
    gpu: bool = False
    node: str = ""
    alive: bool = True
    cameras: set[str] = field(default_factory=set)
    status: dict = field(default_factory=dict)
    missed: int = 0                  # polls without an answer in a row


@dataclass
class CameraState:
    source: SourceConfig
    load: CameraLoad
    host: str | None = None
    done: bool = False
    moves: int = 0                   # times it was moved after its host died
    final: dict | None = None        # its last counters from a host that died
    carried: int = 0                 # frames its outputs held when it moved (written before)


def camera_load(source: SourceConfig) -> CameraLoad:
    """A camera's frame rate and size: read from a file; a live camera is assumed 1080p at
    15 fps (or its `max_fps`)."""
    fps, pixels = 15.0, 1920 * 1080
    if not is_url(source.uri):
        import av

        try:
            with av.open(source.uri) as c:
                s = c.streams.video[0]
                fps = float(s.average_rate or s.guessed_rate or 25)
                pixels = s.codec_context.width * s.codec_context.height
        except Exception:
            pass  # an unreadable file fails on its host, like anywhere else
    if source.max_fps:
        fps = min(fps, source.max_fps)
    return CameraLoad(source.id, fps / max(1, source.stride), pixels)


class ClusterDriver:
    """Runs a config's cameras on `hosts` (already started handles) until every file camera
    has ended and no live camera is left, or until `stop()`."""

    def __init__(self, config: Config, hosts: list[HostState], call: Callable[[list], list],
                 cost: CostModel | None = None, poll_s: float = 1.0, missed_polls_dead: int = 5):
        self.config = config
        self.hosts = {h.name: h for h in hosts}
        self.call = call  # resolves a list of remote calls: [(host, result or exception)]
        self.cost = cost or CostModel()
        self.poll_s = poll_s
        self.missed_polls_dead = missed_polls_dead
        self.cameras: dict[str, CameraState] = {}
        self.events: list[str] = []
        self.work_s = 0.0  # the driver's own time spent in polls, merges and placements
        self.polls = 0

    # -- placing ------------------------------------------------------------------------------
    def _alive(self) -> list[HostState]:
        return [h for h in self.hosts.values() if h.alive]

    def start(self) -> None:
        self.add([s for s in self.config.sources])

    def add(self, sources: list[SourceConfig], resumes: dict[str, Resume] | None = None) -> None:
        """Place cameras on the living hosts, by cost, and start them there."""
        t0 = time.perf_counter()
        alive = self._alive()
        if not alive:
            raise RuntimeError("no pipeline host is alive to take cameras")
        for s in sources:
            if s.id in self.cameras and not self.cameras[s.id].done and self.cameras[s.id].host:
                raise ValueError(f"camera {s.id} is already running on {self.cameras[s.id].host}")
        states = {s.id: CameraState(s, camera_load(s)) for s in sources}
        views = [Host(h.name, h.capacity, h.gpu, {c: self.cameras[c].load.cost(self.cost, h.gpu)
                                                   for c in h.cameras if c in self.cameras}) for h in alive]
        placed = place([st.load for st in states.values()], views, self.cost)
        calls = []
        for cam, host_name in placed.items():
            st = states[cam]
            previous = self.cameras.get(cam)
            if previous is not None:
                st.moves, st.final, st.carried = previous.moves, previous.final, previous.carried
            st.host = host_name
            self.cameras[cam] = st
            self.hosts[host_name].cameras.add(cam)
            resume = (resumes or {}).get(cam, Resume())
            calls.append((self.hosts[host_name], "add", (st.source, resume)))
        for (host, _, args), (_, result) in zip(calls, self.call(calls)):
            if isinstance(result, BaseException):
                log.error("host %s: could not start camera %s: %s", host.name, args[0].id, result)
        self.work_s += time.perf_counter() - t0

    def remove(self, camera: str) -> None:
        st = self.cameras.get(camera)
        if st is None or st.host is None or st.done:
            raise ValueError(f"camera {camera} is not running")
        self.call([(self.hosts[st.host], "remove", (camera,))])

    # -- watching -----------------------------------------------------------------------------
    def poll(self) -> None:
        """One round: every host's status; hosts gone (or silent too long) hand their
        unfinished cameras to the survivors, resumed where their outputs end."""
        t0 = time.perf_counter()
        self.polls += 1
        alive = self._alive()
        for host, result in self.call([(h, "status", ()) for h in alive]):
            if isinstance(result, BaseException):
                host.missed += 1
                gone = "Died" in type(result).__name__ or host.missed >= self.missed_polls_dead
                if gone:
                    self._lost(host, f"{type(result).__name__}")
                continue
            host.missed = 0
            host.status = result
            host.node = result.get("node", host.node)
            for cam, c in result["cameras"].items():
                st = self.cameras.get(cam)
                if st is not None and st.host == host.name and c["state"] in DONE_STATES and cam not in result["open"]:
                    st.done = True
        self.work_s += time.perf_counter() - t0

    def _lost(self, host: HostState, why: str) -> None:
        host.alive = False
        orphans = [c for c in host.cameras if not self.cameras[c].done]
        self.events.append(f"host {host.name} on {host.node or '?'} lost ({why}): moving {len(orphans)} camera(s)")
        log.error(self.events[-1])
        for cam in orphans:
            self.cameras[cam].final = host.status.get("cameras", {}).get(cam)
            self.cameras[cam].moves += 1
            self.cameras[cam].host = None
        resumes = {}
        for cam in orphans:
            st = self.cameras[cam]
            resumes[cam], st.carried = resume_point(self.config.outputs, cam, bool(st.source.live))
            log.info("camera %s: resumes at frame %d, video segment %d", cam, resumes[cam].start_at,
                     resumes[cam].segment)
        host.cameras.clear()
        if orphans and self._alive():
            self.add([self.cameras[c].source for c in orphans], resumes)

    def finished(self) -> bool:
        return bool(self.cameras) and all(st.done for st in self.cameras.values())

    # -- reporting ----------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """One summary for the whole cluster, in the shape of a pipeline's snapshot, plus
        the hosts and their health."""
        t0 = time.perf_counter()
        cameras: dict[str, dict] = {}
        latency = Histogram()
        engines: dict[str, dict] = {}
        for h in self.hosts.values():
            status = h.status
            if not status:
                continue
            if h.alive:
                latency.merge(Histogram.from_counts(status["latency_counts"], status["latency_total"],
                                                    status["latency_max"]))
            for name, e in status.get("engines", {}).items():
                engines[f"{h.name}/{name}"] = e
            for cam, c in status["cameras"].items():
                st = self.cameras.get(cam)
                if st is not None and st.host == h.name:
                    cameras[cam] = {**c, "processed": c["processed"] + st.carried, "host": h.name, "node": h.node,
                                    "moves": st.moves}
        for cam, st in self.cameras.items():
            if cam not in cameras and st.final:
                cameras[cam] = {**st.final, "host": None, "node": None, "moves": st.moves}
        processed = sum(c["processed"] for c in cameras.values())
        snap = {"processed": processed, "latency": latency.summary_ms(), "cameras": cameras, "engines": engines,
                "hosts": {h.name: {"node": h.node, "alive": h.alive, "cameras": sorted(h.cameras),
                                   "cpu_percent": h.status.get("cpu_percent")} for h in self.hosts.values()},
                "events": list(self.events)}
        self.work_s += time.perf_counter() - t0
        return snap


def direct_call(calls: list) -> list:
    """The calls made in this process, one after the other (hosts that are plain objects:
    stand-ins in tests and simulations)."""
    out = []
    for host, method, args in calls:
        try:
            out.append((host, getattr(host.handle, method)(*args)))
        except Exception as e:
            out.append((host, e))
    return out


def default_call(calls: list, timeout: float = 10.0) -> list:
    """Ray's way to make the calls: all at once, each waited for at most `timeout`."""
    import ray

    refs = []
    for host, method, args in calls:
        try:
            refs.append(getattr(host.handle, method).remote(*args))
        except Exception as e:  # the actor handle itself is gone
            refs.append(e)
    pending = [r for r in refs if not isinstance(r, BaseException)]
    ready, _ = ray.wait(pending, num_returns=len(pending), timeout=timeout) if pending else ([], [])
    ready_set = set(ready)
    out = []
    for (host, _, _), ref in zip(calls, refs):
        if isinstance(ref, BaseException):
            out.append((host, ref))
        elif ref not in ready_set:
            out.append((host, TimeoutError(f"no answer within {timeout:g}s")))
        else:
            try:
                out.append((host, ray.get(ref)))
            except Exception as e:
                out.append((host, e))
    return out

