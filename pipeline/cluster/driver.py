"""The cluster driver: places cameras on pipeline hosts (Ray actors), watches their
health, moves the cameras of a host that dies or hangs to the survivors (killed and its
writers fenced first), and merges the hosts' statuses into one snapshot.

Only control traffic crosses machines: placement decisions, camera add/remove, and one
small status per host per poll (per-camera counters and one latency histogram). The
driver's work grows with cameras and hosts, never with frames.

Ray does what it is good at: scheduling hosts onto nodes with the resources they ask for
(a GPU each, or a number of CPUs), spreading them, telling the driver when an actor is
gone, and killing one. Cameras are placed by this driver, which knows their cost
(`placement`). A hung host is noticed by its silence: each poll waits `poll_s` for the
answers, and a host silent for `host_timeout_s` is lost.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from pipeline.cluster.placement import CameraLoad, CostModel, Host, place
from pipeline.cluster.resume import resume_point
from pipeline.cluster.status import HostStatus
from pipeline.config import Config, SourceConfig, is_url
from pipeline.frames import Resume
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.registry import CameraState
from pipeline.metrics.snapshot import (CameraSnapshot, DeliveryStats, DriverSnapshot, HostSnapshot, Latency, Recent,
                                       Snapshot)
from pipeline.sinks.lease import Lease

log = logging.getLogger("pipeline.cluster")

Call = Callable[[list, float], list]  # remote calls [(host, method, args)], timeout -> [(host, result or error)]


class HostGone(Exception):
    """The host's actor is dead (the call layer recognises its runtime's errors)."""


@dataclass
class HostState:
    name: str
    handle: Any                      # the actor (or a stand-in with the same methods)
    capacity: float
    gpu: bool = False
    node: str = ""
    alive: bool = True
    cameras: set[str] = field(default_factory=set)
    status: HostStatus | None = None
    web: int | None = None           # the port of its own web server on this machine (`--processes`)
    answered: float = field(default_factory=time.monotonic)  # its last status answer


@dataclass
class CameraRun:
    source: SourceConfig
    load: CameraLoad
    host: str | None = None
    done: bool = False
    moves: int = 0                   # times it was moved after its host died
    final: CameraSnapshot | None = None  # its last counters from a host that died
    carried: int = 0                 # frames its outputs held when it (re)started, not counted by its host


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
    has ended and no live camera is left, or until `stop()`. A host that does not answer
    for `host_timeout_s` (hung, cut off) or whose actor died is lost: it is killed, its
    cameras' writers are fenced (`Lease`), and its cameras move to the survivors."""

    def __init__(self, config: Config, hosts: list[HostState], call: Call, kill: Callable[[HostState], None],
                 cost: CostModel | None = None, poll_s: float = 1.0, host_timeout_s: float = 5.0):
        self.config, self.call, self.kill = config, call, kill
        self.hosts = {h.name: h for h in hosts}
        self.cost = cost or CostModel()
        self.poll_s, self.host_timeout_s = poll_s, host_timeout_s
        self.cameras: dict[str, CameraRun] = {}
        self.incidents: list[str] = []
        self.work_s = 0.0  # the driver's own time spent in polls, merges and placements
        self.polls = 0
        self.started = time.monotonic()
        self.finished_at: float | None = None

    # -- placing ------------------------------------------------------------------------------
    def alive(self) -> list[HostState]:
        return [h for h in self.hosts.values() if h.alive]

    def _running(self, host: HostState) -> dict[str, float]:
        """The costs of the host's cameras still running: the ones that ended take nothing."""
        return {c: self.cameras[c].load.cost(self.cost, host.gpu) for c in host.cameras
                if c in self.cameras and not self.cameras[c].done}

    def start(self) -> None:
        self.started = time.monotonic()
        self.add(list(self.config.sources))

    def add(self, sources: list[SourceConfig], resumes: dict[str, Resume] | None = None) -> None:
        """Place cameras on the living hosts, by cost, and start them there, each under a
        new lease of its outputs. An id that ran before continues its numbering and files."""
        t0 = time.perf_counter()
        alive = self.alive()
        if not alive:
            raise RuntimeError("no pipeline host is alive to take cameras")
        for s in sources:
            st = self.cameras.get(s.id)
            if st is not None and not st.done and st.host:
                raise ValueError(f"camera {s.id} is already running on {st.host}")
        resumes = dict(resumes or {})
        for s in sources:
            if s.id in self.cameras and s.id not in resumes:  # returns: nothing it wrote is overwritten
                resumes[s.id], self.cameras[s.id].carried = resume_point(self.config.outputs, s.id, False)
        states = {s.id: CameraRun(s, camera_load(s)) for s in sources}
        views = [Host(h.name, h.capacity, h.gpu, self._running(h)) for h in alive]
        calls = []
        for cam, host_name in place([st.load for st in states.values()], views, self.cost).items():
            st, previous, host = states[cam], self.cameras.get(cam), self.hosts[host_name]
            if previous is not None:
                st.moves, st.final, st.carried = previous.moves, previous.final, previous.carried
                if host.status is not None:  # its counters there go on from its earlier run on that host
                    before = host.status.cameras.get(cam)
                    st.carried -= before.processed if before is not None else 0
            st.host = host_name
            self.cameras[cam] = st
            host.cameras.add(cam)
            resume = replace(resumes.get(cam, Resume()), epoch=Lease.grant(self.config.outputs.dir, cam))
            calls.append((host, "add", (st.source, resume)))
        for (host, _, args), (_, result) in zip(calls, self.call(calls, self.host_timeout_s)):
            if isinstance(result, BaseException):
                host.cameras.discard(args[0].id)
                self._cannot_run(args[0].id, f"host {host.name} could not start it: {result}")
        self.work_s += time.perf_counter() - t0

    def _cannot_run(self, camera: str, why: str) -> None:
        """A camera no host runs: failed in the summary and done, so the run can end."""
        st = self.cameras[camera]
        st.host, st.done, st.final = None, True, replace(st.final or CameraSnapshot(), state=CameraState.FAILED.value)
        log.error("camera %s: %s", camera, why)

    def remove(self, camera: str) -> None:
        st = self.cameras.get(camera)
        if st is None or st.host is None or st.done:
            raise ValueError(f"camera {camera} is not running")
        self.call([(self.hosts[st.host], "remove", (camera,))], self.host_timeout_s)

    def running(self) -> list[str]:
        return sorted(c for c, st in self.cameras.items() if st.host and not st.done)

    # -- watching -----------------------------------------------------------------------------
    def poll(self) -> None:
        """One round: every host's status, each waited for at most `poll_s`; hosts dead or
        silent for `host_timeout_s` hand their unfinished cameras to the survivors."""
        t0 = time.perf_counter()
        self.polls += 1
        for host, result in self.call([(h, "status", ()) for h in self.alive()], self.poll_s):
            if isinstance(result, HostGone):
                self._lost(host, str(result) or "its actor died")
            elif isinstance(result, BaseException):
                silent = time.monotonic() - host.answered
                if silent > self.host_timeout_s:
                    self._lost(host, f"no answer for {silent:.1f}s")
            else:
                self._update(host, result)
        if self.finished_at is None and self.finished():
            self.finished_at = time.monotonic()
        self.work_s += time.perf_counter() - t0

    def _update(self, host: HostState, status: HostStatus) -> None:
        host.answered = time.monotonic()
        host.status = status
        host.node = status.node or host.node
        for cam, c in status.cameras.items():
            st = self.cameras.get(cam)
            if st is not None and st.host == host.name and CameraState(c.state).done and cam not in status.open:
                st.done = True

    def _lost(self, host: HostState, why: str) -> None:
        """Kill the host first (a hung one might wake), fence its cameras' writers, cut
        their outputs back to where they resume, then place them on the survivors."""
        host.alive = False
        self.kill(host)
        orphans = [c for c in host.cameras if not self.cameras[c].done]
        self.incidents.append(f"host {host.name} on {host.node or '?'} lost ({why}): moving {len(orphans)} camera(s)")
        log.error(self.incidents[-1])
        resumes = {}
        for cam in orphans:
            st = self.cameras[cam]
            st.final = host.status.cameras.get(cam) if host.status else None
            st.moves += 1
            st.host = None
            Lease.grant(self.config.outputs.dir, cam)  # from here the old writers cannot write
            resumes[cam], st.carried = resume_point(self.config.outputs, cam, not st.source.live)
            log.info("camera %s: resumes at frame %d (seq %d), video segment %d", cam, resumes[cam].start_at,
                     resumes[cam].seq, resumes[cam].segment)
        host.cameras.clear()
        if orphans and self.alive():
            self.add([self.cameras[c].source for c in orphans], resumes)
        for cam in orphans if not self.alive() else ():
            self._cannot_run(cam, "no pipeline host is left to run it")

    def finished(self) -> bool:
        return bool(self.cameras) and all(st.done for st in self.cameras.values())

    # -- reporting ----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """One summary for the whole cluster, in the shape of a pipeline's snapshot, plus
        the hosts and their health."""
        t0 = time.perf_counter()
        snap = merged_snapshot(self)
        self.work_s += time.perf_counter() - t0
        return snap

    @property
    def outputs_failed(self) -> dict[str, str]:
        return {k: v for h in self.hosts.values() if h.status for k, v in h.status.outputs_failed.items()}


class HostsRun:
    """What a run of hosts under the driver (`ClusterRun` on Ray, `ProcessRun` over this
    machine's processes) shows the one run loop the same way: `wait` polls the hosts until
    the cameras are done or every host stopped; `stop` asks every living host to drain (or
    abort), the calls sent from the loop's thread (`_send_stops`, each through
    `_send_stop`); the snapshot and failed outputs are the driver's."""

    driver: ClusterDriver

    def __init__(self) -> None:
        self._stops: dict[str, object] = {}  # host -> its pending `stop` call
        self._stop: bool | None = None  # None: running; False: drain; True: abort
        self._aborts: set[str] = set()  # hosts told to abort

    def _send_stop(self, host: HostState, abort: bool) -> object:
        raise NotImplementedError

    def _stopped(self) -> bool:
        """Every stop sent has been answered."""
        raise NotImplementedError

    def _polled(self) -> None:
        """After each poll (the cluster serves its control requests here)."""

    def start(self) -> None:
        self.driver.start()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = time.monotonic() + (timeout or 0.0)
        while True:
            self._send_stops()
            self.driver.poll()
            self._polled()
            if self.driver.finished() or (self._stops and self._stopped()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(self.driver.poll_s, max(0.0, deadline - time.monotonic())))

    def stop(self, abort: bool = False) -> None:
        """Every host is to stop its cameras and drain (`abort`: at once). Called from a
        signal handler: the calls go out from `wait` (or `close`)."""
        self._stop = bool(self._stop) or abort

    def _send_stops(self) -> None:
        if self._stop is None:
            return
        for h in self.driver.alive():
            if h.name not in self._stops or (self._stop and h.name not in self._aborts):
                self._stops[h.name] = self._send_stop(h, self._stop)
                if self._stop:
                    self._aborts.add(h.name)

    def snapshot(self) -> Snapshot:
        return self.driver.snapshot()

    @property
    def outputs_failed(self) -> dict[str, str]:
        return self.driver.outputs_failed


def merged_snapshot(driver: ClusterDriver) -> Snapshot:
    """The hosts' statuses merged: latency histograms and event counts added up, engines
    by host, every camera's counters from where it runs."""
    latency, recent, engines, events = Histogram(), Histogram(), {}, {}
    for h in driver.hosts.values():
        if h.status is None:
            continue
        latency.merge(h.status.latency())
        if h.alive:
            recent.merge(h.status.recent_latency())
        engines.update({f"{h.name}/{name}": e for name, e in h.status.engines.items()})
        for dest, e in h.status.events.items():
            events.setdefault(dest, DeliveryStats()).add(e)
    cameras = camera_entries(driver)
    processed = sum(c.processed for c in cameras.values())
    elapsed = (driver.finished_at or time.monotonic()) - driver.started
    cpu = [h.status.cpu_percent for h in driver.alive() if h.status and h.status.cpu_percent is not None]
    hosts = {h.name: HostSnapshot(h.node, h.alive, h.status.cpu_percent if h.status else None,
                                  sorted(c for c in h.cameras if not driver.cameras[c].done))
             for h in driver.hosts.values()}
    return Snapshot(elapsed_s=round(elapsed, 3), throughput_fps=round(processed / elapsed, 2) if elapsed > 0 else 0.0,
                    processed=processed, latency=Latency.of(latency), cpu_percent=round(sum(cpu), 1), cameras=cameras,
                    recent=Recent(fps=round(sum(c.recent.fps for c in cameras.values()), 2), latency=Latency.of(recent)),
                    engines=engines, events=events, hosts=hosts, incidents=list(driver.incidents),
                    driver=DriverSnapshot(driver.polls, round(driver.work_s, 4)))


def camera_entries(driver: ClusterDriver) -> dict[str, CameraSnapshot]:
    """Every camera's counters from the host it runs on (plus what its outputs held
    before), or its last ones from a host that died."""
    cameras = {}
    for cam, st in driver.cameras.items():
        host = driver.hosts.get(st.host) if st.host else None
        c = host.status.cameras.get(cam) if host is not None and host.status is not None else None
        if c is not None:
            cameras[cam] = replace(c, processed=c.processed + st.carried, host=st.host, node=host.node, moves=st.moves)
        elif st.final:
            cameras[cam] = replace(st.final, host=None, node=None, moves=st.moves)
    return cameras


def direct_call(calls: list, timeout: float = 0.0) -> list:
    """The calls made in this process, one after the other (hosts that are plain objects:
    stand-ins in tests and simulations)."""
    out = []
    for host, method, args in calls:
        try:
            out.append((host, getattr(host.handle, method)(*args)))
        except Exception as e:
            out.append((host, e))
    return out
