"""`pipeline run --processes N`: the config's cameras spread over N host processes of this
machine (`processes`), placed, watched and merged by the cluster's driver, shaped for the
one run loop (`pipeline.runloop.run`) as `ClusterRun` is.

A host process that dies is lost as a cluster host is: its cameras' writers fenced, the
cameras resumed on the others from where their outputs end. With `outputs.web`, the page
is served here, on the config's port (`front`), each camera's live routes relayed to the
host that runs it; with `outputs.web.control`, cameras added and removed on it are placed
by the driver, on its own thread (`_polled`), as `pipeline cluster add|remove` are.
"""
from __future__ import annotations

import logging
import queue
import time
from concurrent.futures import Future
from dataclasses import replace
from typing import Callable

from pipeline.cluster.driver import ClusterDriver, HostsRun, HostState
from pipeline.cluster.front import FrontServer, HostsView, host_web
from pipeline.cluster.processes import kill_process, process_call, start_processes
from pipeline.config import Config, SourceConfig
from pipeline.config.limits import visible_cores
from pipeline.control import CameraControl
from pipeline.errors import CameraInUse, UnknownCamera
from pipeline.metrics.snapshot import Snapshot

log = logging.getLogger("pipeline.cluster")

CONTROL_WAIT_S = 60.0  # an add waits for the driver's next poll, then for a host to start the camera


def cores_each(config: Config, processes: int) -> int:
    """The cores each host plans its threads for: the run's (`runtime.threads`, at most the
    visible cores), shared."""
    cores = min(config.runtime.threads or visible_cores(), visible_cores())
    return max(1, cores // processes)


class ProcessRun(HostsRun):
    """`wait` polls the hosts; `stop` drains (or aborts) every host; `close` collects their
    last statuses and ends their processes."""

    def __init__(self, config: Config, processes: int, max_frames: int | None = None, host_timeout_s: float = 5.0):
        if len(config.sources) < processes:  # a host with no camera would only hold its models
            log.info("--processes %d: %d camera(s), so %d process(es)", processes, len(config.sources),
                     max(1, len(config.sources)))
            processes = max(1, len(config.sources))
        self.front: FrontServer | None = None
        self.view = HostsView(Snapshot())  # what the page reads, published by the driver's thread (`_publish`)
        self._calls: queue.SimpleQueue[tuple[Callable[[], object], Future]] = queue.SimpleQueue()
        self._ended = False
        hosts_config = config
        if config.outputs.web is not None:  # its port taken before any host starts: one in use stops the run at once
            inner = host_web(config.outputs.web)
            hosts_config = replace(config, outputs=replace(config.outputs, web=inner))
            control = CameraControl(self, config) if config.outputs.web.control else None
            self.front = FrontServer(config, lambda: self.view, inner.token or "", control)
        try:
            self.hosts = start_processes(hosts_config, processes, cores_each(config, processes), max_frames)
        except BaseException:
            if self.front is not None:
                self.front.close()
            raise
        self.driver = ClusterDriver(config, self.hosts, process_call, kill_process, host_timeout_s=host_timeout_s)
        super().__init__()

    def start(self) -> None:
        super().start()
        if self.front is not None:
            self._publish()
            self.front.start()

    def _publish(self) -> None:
        if self.front is not None:
            self.view = HostsView.of(self.driver)

    def _polled(self) -> None:
        """The page's camera control served on the driver's thread between polls (a call
        its caller stopped waiting for is dropped), then what the page reads published."""
        while True:
            try:
                work, done = self._calls.get_nowait()
            except queue.Empty:
                break
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(work())
            except Exception as e:
                done.set_exception(e)
        self._publish()

    def _on_driver(self, work: Callable[[], object]) -> None:
        """`work` done on the driver's thread (from the page's threads), its outcome here."""
        if self._stop is not None or self._ended:
            raise RuntimeError("the run is ending")
        done: Future = Future()
        self._calls.put((work, done))
        try:
            done.result(CONTROL_WAIT_S)
        except TimeoutError:
            if done.cancel():
                raise RuntimeError("the run did not take the request in time") from None
            done.result()  # under way: its outcome

    def _refuse_calls(self) -> None:
        self._ended = True
        while True:
            try:
                _, done = self._calls.get_nowait()
            except queue.Empty:
                return
            if done.set_running_or_notify_cancel():
                done.set_exception(RuntimeError("the run is ending"))

    def _add(self, source: SourceConfig) -> None:
        if source.id in self.driver.running():
            raise CameraInUse(f"source.id: camera {source.id} is already running")
        self.driver.add([source])

    def _remove(self, camera: str) -> None:
        if camera not in self.driver.running():
            raise UnknownCamera(f"camera {camera} is not running")
        self.driver.remove(camera)

    # `pipeline.control.Runs`, called from the page's threads
    def add_camera(self, source: SourceConfig) -> None:
        self._on_driver(lambda: self._add(source))

    def remove_camera(self, camera: str) -> None:
        self._on_driver(lambda: self._remove(camera))

    def cameras(self) -> list[str]:
        return self.view.running

    def pids(self) -> list[int]:
        return [h.handle.process.pid for h in self.hosts]

    def _send_stop(self, host: HostState, abort: bool) -> int:
        return host.handle.send("stop", abort)

    def _stopped(self) -> bool:
        return all(h.handle.answered(self._stops[h.name]) for h in self.driver.alive() if h.name in self._stops)

    def close(self, timeout: float = 30.0) -> None:
        """The hosts' last statuses (stopped now if they were not), then their processes end.
        An abort asked while they drain (a second Ctrl-C) goes out at once."""
        self._refuse_calls()
        try:
            self.stop(bool(self._stop))
            deadline = time.monotonic() + max(timeout, 120.0)
            while True:
                self._send_stops()
                if self._stopped() or time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
            for h in self.driver.alive():
                try:
                    h.status = h.handle.answer(self._stops[h.name], time.monotonic())
                except Exception as e:
                    log.error("host %s: no final status: %s", h.name, e)
            if self.driver.finished_at is None:
                self.driver.finished_at = time.monotonic()
        finally:
            if self.front is not None:
                self.front.close()
            for h in self.hosts:
                h.handle.close(10)
