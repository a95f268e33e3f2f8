"""The one run loop: `pipeline run`, `pipeline run --cluster | --processes` and library
users run a graph (a `Pipeline`, or the driver of hosts) through `run()`, so the progress line, the
signals, the summary, the report and the exit status mean the same everywhere.

Exit status: 0 done; 1 every camera failed, an output could not be written, or an event,
an event's picture or a store record was lost; 2 bad configuration or a start-up failure
(`StartupError`: a port in use, an output folder held by another run); 130 interrupted
by Ctrl-C (SIGINT) or aborted by a second signal (outputs finalised). A stop asked for by
SIGTERM is how a service manager ends a run: once drained it ends as a run that reached
its end would (0 when everything was written), as systemd expects.
Signals: the first SIGINT or SIGTERM stops the cameras and drains what is under way; the
second aborts (queued work discarded, files finalised at once); once the files are final,
they are ignored. SIGHUP reads the config file again (`RunOptions.reload`): lines, zones
and masks change while running; it is handled between progress checks, never inside the
handler.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from pipeline.errors import DONE, FAILED, INTERRUPTED, StartupError
from pipeline.metrics.report import progress_line, summary_table
from pipeline.metrics.snapshot import Snapshot
from pipeline.redact import redact

log = logging.getLogger("pipeline")

LOCK_FILE = ".pipeline.lock"


class Runner(Protocol):
    """What `run` drives: `Pipeline` (one process) and `ClusterRun` (hosts on Ray)."""

    def start(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...

    def stop(self, abort: bool = False) -> None: ...

    def close(self, timeout: float = 30.0) -> None: ...

    def snapshot(self) -> Snapshot: ...

    @property
    def outputs_failed(self) -> dict[str, str]: ...


@dataclass
class RunOptions:
    report: str | None = None            # write the final snapshot here as JSON
    progress: bool = False               # a progress line that rewrites itself (a terminal)
    log_interval_s: float = 10.0         # else a progress log line this often
    prometheus_port: int | None = None   # serve the snapshot as Prometheus metrics while running
    reload: Callable[[], object] | None = None  # on SIGHUP: read the config again and apply what can change live


def exit_status(snap: Snapshot, outputs_failed: dict[str, str], interrupted: bool) -> int:
    """The run's exit status (see the module's docstring): the one place it is decided.
    `interrupted`: stopped by Ctrl-C or aborted (a SIGTERM's drain is not)."""
    if interrupted:
        return INTERRUPTED
    cams = snap.cameras.values()
    pictures_or_rows_lost = any(c.snapshots_lost or c.store_lost for c in cams)
    if outputs_failed or snap.events_lost or pictures_or_rows_lost or (cams and all(c.state == "failed" for c in cams)):
        return FAILED
    return DONE


class OutputLock:
    """An exclusive advisory lock on the output folder for the whole run (the OS releases
    it when the process dies): two runs never write one folder. The lock file names the
    holder's pid and goes when the run ends; a run that locked a file just unlinked by
    the run before it locks the new one instead."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, LOCK_FILE)
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise StartupError(f"outputs.dir: {os.path.dirname(self.path)} is in use by another run "
                                   f"(pid {holder}); give this one another --output") from None
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # the run before removed it meanwhile: lock the one there now
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *_exc) -> None:
        if self._fd is not None:
            os.unlink(self.path)
            os.close(self._fd)  # closing releases the lock
            self._fd = None


class Signals:
    """SIGINT / SIGTERM while running: the first drains, the second aborts; SIGHUP asks
    for a reload (`reload_asked`, taken by `watch`)."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.count = 0
        self.interrupted = False  # a Ctrl-C, or a second signal: the run did not end as asked
        self.reload_asked = threading.Event()
        self.installed = False

    def __enter__(self) -> "Signals":
        self.installed = threading.current_thread() is threading.main_thread()  # Python's rule for handlers
        for s in (signal.SIGINT, signal.SIGTERM) if self.installed else ():
            signal.signal(s, self._on_signal)
        if self.installed:
            signal.signal(signal.SIGHUP, lambda _signum, _frame: self.reload_asked.set())
        return self

    def _on_signal(self, signum: int, _frame) -> None:
        self.count += 1
        self.interrupted = self.interrupted or signum == signal.SIGINT or self.count > 1
        name = signal.Signals(signum).name
        if self.count == 1:
            log.warning("%s: stopping the cameras and draining (again to abort faster)", name)
            self.runner.stop()
        else:
            log.warning("%s again: aborting, finalising the output files now", name)
            self.runner.stop(abort=True)

    def __exit__(self, *_exc) -> None:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if self.installed else ():  # the files are final: a late signal changes nothing now
            signal.signal(s, signal.SIG_IGN)


def reload_now(options: RunOptions) -> None:
    """A SIGHUP's reload, in the run loop's thread; it logs its own outcome."""
    if options.reload is None:
        log.warning("SIGHUP: this run cannot reload its config (a run of hosts: --cluster, --processes): "
                    "restart it to apply changes")
        return
    options.reload()


def watch(runner: Runner, options: RunOptions, reload_asked: threading.Event | None = None) -> None:
    """Until every camera is done: the progress line (terminal) or a periodic log line,
    and the reloads a SIGHUP asked for."""
    last_log = time.monotonic()
    try:
        while not runner.wait(0.5):
            if reload_asked is not None and reload_asked.is_set():
                reload_asked.clear()
                reload_now(options)
            snap = runner.snapshot().redacted()
            if options.progress:
                print("\r\x1b[2K" + progress_line(snap)[:200], end="", file=sys.stderr, flush=True)
            elif time.monotonic() - last_log >= options.log_interval_s:
                log.info(progress_line(snap))
                last_log = time.monotonic()
    finally:
        if options.progress:
            print(file=sys.stderr)


def write_report(path: str, snap: Snapshot) -> None:
    try:
        with open(path, "w") as f:
            json.dump(snap.to_dict(), f, indent=2)
        log.info("report written to %s", redact(path))
    except OSError as e:
        log.error("metrics.report: could not write %s: %s", redact(path), e.strerror or e)


def run(runner: Runner, options: RunOptions) -> int:
    """Run to the end (or a signal): the summary on stdout, the report, the exit status.
    `runner` is built and not started; it is closed here whatever happens."""
    exporter = None
    try:
        if options.prometheus_port is not None:
            from pipeline.metrics.prometheus import PrometheusExporter

            exporter = PrometheusExporter(runner.snapshot, options.prometheus_port)
            log.info("metrics on http://127.0.0.1:%d/metrics", exporter.port)
    except BaseException:
        runner.close()
        raise
    with Signals(runner) as signals:
        try:
            runner.start()
            watch(runner, options, signals.reload_asked)
        finally:
            runner.close(timeout=5.0 if signals.count > 1 else 30.0)
    if exporter is not None:
        exporter.close()
    snap = runner.snapshot().redacted()
    print(summary_table(snap))
    if options.report:
        write_report(options.report, snap)
    return exit_status(snap, runner.outputs_failed, signals.interrupted)
