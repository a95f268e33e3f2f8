"""`pipeline run --cluster ADDRESS` and `pipeline cluster add|remove|status` on Ray.

`ADDRESS` is `local` (start Ray on this machine), `auto` (the cluster this machine is a
node of) or a Ray address. One pipeline host actor runs per GPU of the cluster (or per
`--cpus-per-host` CPUs where there is none), spread over the nodes; the driver places the
config's cameras on them and keeps them running (see `driver`). Outputs must be on
storage every node sees (`outputs.dir`).

The driver also keeps a small named actor, `pipeline-control`, through which `pipeline
cluster add|remove` reach a running driver (and wait for its answer: a refusal is exit 2
with its reason) and `pipeline cluster status` reads its last merged snapshot. Only one
driver runs on a cluster: a second finds that actor taken and stops with one line.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

from pipeline.cluster.driver import ClusterDriver, HostGone, HostsRun, HostState
from pipeline.cluster.host import PipelineHost
from pipeline.config import Config, SourceConfig
from pipeline.control import CameraControl
from pipeline.engines.session import ModelError
from pipeline.errors import PipelineError, StartupError
from pipeline.metrics.snapshot import Snapshot
from pipeline.redact import redact

log = logging.getLogger("pipeline.cluster")

NAMESPACE = "pipeline"
CONTROL = "pipeline-control"
INSTALL = "the cluster mode needs Ray: pip install 'pipeline[cluster]' (or pip install ray)"
ANSWER_WAIT_S = 60.0  # how long `pipeline cluster add|remove` waits for the driver's answer


class ControlMailbox:
    """Requests for a running driver, its answers, and its latest merged snapshot."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.answers: dict[int, str | None] = {}  # request number -> None (done) or why it was refused
        self.count = 0
        self.latest: Snapshot | None = None

    def put(self, request: dict) -> int:
        self.count += 1
        self.requests.append({**request, "number": self.count})
        return self.count

    def take(self) -> list[dict]:
        out, self.requests = self.requests, []
        return out

    def answer(self, number: int, refused: str | None) -> None:
        self.answers[number] = refused

    def answered(self, number: int) -> tuple[bool, str | None]:
        return number in self.answers, self.answers.get(number)

    def publish(self, snapshot: Snapshot) -> None:
        self.latest = snapshot

    def snapshot(self) -> Snapshot | None:
        return self.latest


def import_ray():
    try:
        import ray
    except ImportError:
        raise SystemExit(f"error: {INSTALL}") from None
    return ray


def connect(address: str):
    """Ray, connected (`local`: started here); a cluster that cannot be reached is a StartupError."""
    ray = import_ray()
    try:
        if address == "local":
            ray.init(namespace=NAMESPACE, include_dashboard=False, logging_level=logging.WARNING)
        else:
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING)
    except ConnectionError as e:
        raise StartupError(f"--cluster {redact(address)}: no Ray cluster to connect to ({redact(str(e))})") from None
    return ray


def ray_call(calls: list, timeout: float) -> list:
    """Ray's way to make the calls: all at once, each waited for at most `timeout`; a dead
    actor (Ray's actor errors) is `HostGone`, a slow one a `TimeoutError`."""
    import ray
    from ray.exceptions import RayActorError

    refs = []
    for host, method, args in calls:
        try:
            refs.append(getattr(host.handle, method).remote(*args))
        except RayActorError as e:  # the actor handle itself is gone
            refs.append(HostGone(type(e).__name__))
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
            except RayActorError as e:
                out.append((host, HostGone(type(e).__name__)))
            except Exception as e:
                out.append((host, e))
    return out


def kill_host(host: HostState) -> None:
    """Ray kills the actor's process (a hung one too); it is never restarted."""
    import ray

    try:
        ray.kill(host.handle, no_restart=True)
    except Exception as e:  # already gone
        log.info("host %s: %s", host.name, e)


def start_hosts(ray, config: Config, max_frames: int | None, hosts: int | None, cpus_per_host: int) -> list[HostState]:
    """Pipeline host actors: one per GPU, or per `cpus_per_host` CPUs; spread over nodes."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    count = hosts or (gpus if gpus else max(1, int(resources.get("CPU", 1)) // cpus_per_host))
    options = {"num_cpus": cpus_per_host, "max_restarts": 0, "scheduling_strategy": "SPREAD", "max_concurrency": 4}
    if gpus:
        options["num_gpus"] = 1
    actor = ray.remote(PipelineHost)
    handles = [actor.options(name=f"pipeline-host-{i}", **options).remote(f"host{i}", config, cpus_per_host, max_frames)
               for i in range(count)]
    ready = ray.get([h.ready.remote() for h in handles])
    refused = list(dict.fromkeys(p for info in ready for p in info["refused"]))
    if refused:
        raise ModelError(*refused)
    for info in ready:
        log.info("host %s ready on %s (pid %d)", info["host"], info["node"], info["pid"])
    return [HostState(info["host"], h, capacity=1000.0 * cpus_per_host, gpu=bool(gpus), node=info["node"])
            for info, h in zip(ready, handles)]


@dataclass
class ClusterOptions:
    address: str
    hosts: int | None = None
    cpus_per_host: int = 1
    max_frames: int | None = None
    host_timeout_s: float = 5.0


class ClusterRun(HostsRun):
    """`pipeline run --cluster`, shaped for the one run loop (`pipeline.runloop.run`):
    `wait` polls the hosts and serves `pipeline cluster` requests; `stop` drains (or
    aborts) every host; `close` collects their last statuses and leaves Ray."""

    def __init__(self, config: Config, options: ClusterOptions):
        self.ray = ray = connect(options.address)
        try:
            self.mailbox = ray.remote(ControlMailbox).options(name=CONTROL, lifetime="non_detached").remote()
            ray.get(self.mailbox.snapshot.remote())
        except ValueError as e:  # Ray's ActorAlreadyExistsError is one
            ray.shutdown()
            raise StartupError(f"--cluster {redact(options.address)}: another pipeline driver is running on this "
                               f"Ray cluster ({type(e).__name__}: {CONTROL})") from None
        try:
            self.hosts = start_hosts(ray, config, options.max_frames, options.hosts, options.cpus_per_host)
        except BaseException:
            ray.shutdown()
            raise
        self.driver = ClusterDriver(config, self.hosts, ray_call, kill_host, host_timeout_s=options.host_timeout_s)
        self.control = CameraControl(self, config)
        HostsRun.__init__(self)

    def _polled(self) -> None:
        self._serve(self.ray.get(self.mailbox.take.remote()))
        self.mailbox.publish.remote(self.snapshot().redacted())

    def _serve(self, requests: list[dict]) -> None:
        """`pipeline cluster add|remove`, checked as the web API's are (`CameraControl`)."""
        for request in requests:
            refused = None
            try:
                if request["op"] == "add":
                    self.control.add(request["source"], "--source")
                else:
                    self.control.remove(request["camera"])
            except PipelineError as e:
                refused = "; ".join(e.problems)
            except (ValueError, RuntimeError) as e:
                refused = str(e)
            if refused:
                log.error("cluster %s: %s", request["op"], redact(refused))
            self.mailbox.answer.remote(request["number"], refused)

    # `pipeline.control.Runs`
    def add_camera(self, source: SourceConfig) -> None:
        self.driver.add([source])

    def remove_camera(self, camera: str) -> None:
        self.driver.remove(camera)

    def cameras(self) -> list[str]:
        return self.driver.running()

    def _send_stop(self, host: HostState, abort: bool) -> object:
        return host.handle.stop.remote(abort)

    def _stopped(self) -> bool:
        _, pending = self.ray.wait(list(self._stops.values()), num_returns=len(self._stops), timeout=0)
        return not pending

    def close(self, timeout: float = 30.0) -> None:
        """The hosts' last statuses (stopped now if they were not), then leave Ray."""
        try:
            self.stop(bool(self._stop))
            self._send_stops()
            finals = {h.name: h for h in self.driver.alive()}
            refs = {name: ref for name, ref in self._stops.items() if name in finals}
            ready, _ = self.ray.wait(list(refs.values()), num_returns=len(refs), timeout=max(timeout, 120.0))
            for name, ref in refs.items():
                if ref in ready:
                    try:
                        finals[name].status = self.ray.get(ref)
                    except Exception as e:
                        log.error("host %s: no final status: %s", name, e)
            if self.driver.finished_at is None:
                self.driver.finished_at = time.monotonic()
        finally:
            self.ray.shutdown()



def cluster_command(args) -> int:
    """`pipeline cluster add|remove|status` against a running driver; 2 when there is
    none or it refuses the request (its reason on one line)."""
    ray = connect(args.address)
    try:
        mailbox = ray.get_actor(CONTROL, namespace=NAMESPACE)
    except ValueError:
        print(f"error: no pipeline run is going on the Ray cluster at {redact(args.address)}", file=sys.stderr)
        return 2
    if args.action == "status":
        from pipeline.metrics.report import summary_table

        snap = ray.get(mailbox.snapshot.remote())
        print(summary_table(snap) if snap else "the run has not reported yet")
        return 0
    camera = args.source["id"] if args.action == "add" else args.camera
    request = {"op": "add", "source": args.source} if args.action == "add" else {"op": "remove", "camera": camera}
    number = ray.get(mailbox.put.remote(request))
    deadline = time.monotonic() + ANSWER_WAIT_S
    while time.monotonic() < deadline:
        done, refused = ray.get(mailbox.answered.remote(number))
        if done:
            if refused:
                print(f"error: cluster {args.action} {camera}: {redact(refused)}", file=sys.stderr)
                return 2
            print(f"camera {camera}: {'added' if args.action == 'add' else 'removed'}")
            return 0
        time.sleep(0.2)
    print(f"error: cluster {args.action} {camera}: the driver did not answer within {ANSWER_WAIT_S:g}s",
          file=sys.stderr)
    return 2
