"""Pipeline hosts as processes of this machine (`pipeline run --processes N`).

One Python process runs its cameras' per-frame work under one interpreter lock: on a
machine of several cores, a run of many cheap cameras (an NVR that records by copy and
detects on motion) drops frames while cores are idle. Spread over processes, each host
runs the whole graph for its share of the cameras, as a cluster host does (`host`), and
the cluster's driver places them, watches them and merges their statuses: the same
YAML, one summary. Frames never leave their host's process, so none is copied between
processes.

Each host is a child process (a new interpreter: the parent's threads are not forked, and
the parent's main script is not run again as `multiprocessing` would) that takes calls
over a socket pair, each answered on a thread of its own, so a status poll is answered
while a drain is under way, as Ray's actor does with `max_concurrency`. A host whose
parent is gone (its connection closed) aborts its cameras, finalising their files, and ends.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection

import pipeline

from pipeline.cluster.driver import HostGone, HostState
from pipeline.config import Config
from pipeline.errors import StartupError

log = logging.getLogger("pipeline.cluster")

READY_TIMEOUT_S = 300.0  # a host opens and checks its models before it answers
# The child's first lines: Ctrl-C and SIGTERM reach the parent too, which tells each host to
# drain (ignored before any import, so none is cut short); the current folder is not searched
# for modules (`-c` puts it first: a file there must not shadow the ones the run imports).
ENTRY = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); sys.path[:] = [p for p in sys.path if p]; "
         "from pipeline.cluster.processes import main; main()")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pipeline.__file__)))


def child_env() -> dict[str, str]:
    """The environment of a child process that imports this `pipeline`, wherever it came from."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def _logging_of(level: int) -> None:
    """The child logs as the parent does (`pipeline.cli` sets the format): one stderr."""
    from pipeline.redact import RedactingFilter

    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())


def main() -> None:
    """The child's entry (after `ENTRY`'s first lines): its end of the socket pair is the
    fd named on its command line; the first message says what to host."""
    conn = Connection(int(sys.argv[1]))
    try:
        name, config, cores, max_frames, level = conn.recv()
    except (EOFError, OSError):
        return
    _logging_of(level)
    serve(conn, name, config, cores, max_frames)


def serve(conn: Connection, name: str, config: Config, cores: int, max_frames: int | None) -> None:
    """The host, then its calls until the parent is done with it or gone."""
    from pipeline.cluster.host import PipelineHost

    mqtt = config.outputs.events.mqtt
    if mqtt is not None and mqtt.client_id:  # a broker keeps one session per client id
        events = replace(config.outputs.events, mqtt=replace(mqtt, client_id=f"{mqtt.client_id}-{name}"))
        config = replace(config, outputs=replace(config.outputs, events=events))
    if config.outputs.web is not None:  # the host's own server is the run's inner door: the parent announces the page
        logging.getLogger("pipeline.web").setLevel(logging.WARNING)
    host = PipelineHost(name, config, cores, max_frames)
    sending = threading.Lock()

    def answer(number: int, method: str, args: tuple) -> None:
        try:
            reply = (number, True, getattr(host, method)(*args))
        except Exception as e:  # its message crosses, not the object (it may not pickle)
            reply = (number, False, f"{type(e).__name__}: {e}")
        with sending:
            try:
                conn.send(reply)
            except OSError:
                pass  # the parent is gone: the loop below sees it too

    while True:
        try:
            call = conn.recv()
        except (EOFError, OSError):
            break
        if call is None:  # the parent is done with it
            break
        number, method, args = call
        threading.Thread(target=answer, args=(number, method, args), name=f"call-{method}", daemon=True).start()
    if not host.refused:  # stopped already, or the parent is gone: finalise the files and leave
        host.stop(abort=True)


class HostProcess:
    """The parent's handle on one host process: calls numbered, answers collected by a
    reader thread; the process ending (its connection closed) answers every pending call with
    `HostGone`."""

    def __init__(self, name: str, config: Config, cores: int, max_frames: int | None):
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen([sys.executable, "-c", ENTRY, str(theirs.fileno())],
                                            pass_fds=(theirs.fileno(),), env=child_env())
        self._conn = Connection(ours.detach())
        self._sending = threading.Lock()
        self._answers: dict[int, tuple[bool, object]] = {}
        self._abandoned: set[int] = set()  # calls whose caller stopped waiting: their answers are dropped
        self._changed = threading.Condition()
        self._count = 0
        self.gone: str | None = None
        self._send((name, config, cores, max_frames, logging.getLogger().level))
        threading.Thread(target=self._read, name=f"{name}-answers", daemon=True).start()

    def _send(self, message: object) -> None:
        with self._sending:
            try:
                self._conn.send(message)
            except (OSError, ValueError):
                pass  # the connection is closed: `answer` says the host is gone

    def send(self, method: str, *args) -> int:
        """The call's number, to wait for its answer (`answer`)."""
        with self._sending:
            self._count += 1
            number = self._count
        self._send((number, method, args))
        return number

    def _read(self) -> None:
        while True:
            try:
                number, ok, value = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._changed:
                if number in self._abandoned:
                    self._abandoned.discard(number)
                else:
                    self._answers[number] = (ok, value)
                    self._changed.notify_all()
        try:
            code = self.process.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        with self._changed:
            self.gone = f"its process ended (exit code {code})"
            self._changed.notify_all()

    def answered(self, number: int) -> bool:
        with self._changed:
            return number in self._answers or self.gone is not None

    def answer(self, number: int, deadline: float):
        """The call's result; `HostGone`, a `TimeoutError` at `deadline` (monotonic), or a
        `RuntimeError` with the host's error."""
        with self._changed:
            while number not in self._answers:
                if self.gone is not None:
                    raise HostGone(self.gone)
                left = deadline - time.monotonic()
                if left <= 0:
                    self._abandoned.add(number)
                    raise TimeoutError("no answer in time")
                self._changed.wait(left)
            ok, value = self._answers.pop(number)
        if not ok:
            raise RuntimeError(value)
        return value

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()

    def close(self, timeout: float) -> None:
        """Done with the host (one still running aborts and ends); wait for its process."""
        self._send(None)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait()


def process_call(calls: list, timeout: float) -> list:
    """The driver's calls (`driver.Call`): all sent at once, each waited for until `timeout`."""
    sent = [(host, host.handle.send(method, *args)) for host, method, args in calls]
    deadline = time.monotonic() + timeout
    out = []
    for host, number in sent:
        try:
            out.append((host, host.handle.answer(number, deadline)))
        except Exception as e:
            out.append((host, e))
    return out


def kill_process(host: HostState) -> None:
    host.handle.kill()


def start_processes(config: Config, count: int, cores: int, max_frames: int | None) -> list[HostState]:
    """`count` host processes, each planning its threads for `cores` cores, started at
    once and ready (their models opened and checked); a model refused is a `ModelError`."""
    from pipeline.engines.session import ModelError

    handles = [HostProcess(f"host{i}", config, cores, max_frames) for i in range(count)]
    try:
        numbers = [h.send("ready") for h in handles]
        deadline = time.monotonic() + READY_TIMEOUT_S
        ready = [h.answer(n, deadline) for h, n in zip(handles, numbers)]
    except (HostGone, TimeoutError, RuntimeError) as e:  # what it said before it ended is on stderr
        for h in handles:
            h.close(5)
        raise StartupError(f"--processes: a host process did not start: {e}") from None
    except BaseException:
        for h in handles:
            h.close(5)
        raise
    refused = list(dict.fromkeys(p for info in ready for p in info["refused"]))
    if refused:
        for h in handles:
            h.close(30)
        raise ModelError(*refused)
    for info in ready:
        log.info("host %s ready (pid %d)", info["host"], info["pid"])
    return [HostState(info["host"], h, capacity=1000.0 * cores, node=info["node"], web=info["web"])
            for info, h in zip(ready, handles)]
