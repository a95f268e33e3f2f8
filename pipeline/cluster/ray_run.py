"""`pipeline run --cluster ADDRESS` and `pipeline cluster add|remove|status` on Ray.

`ADDRESS` is `local` (start Ray on this machine), `auto` (the cluster this machine is a
node of) or a Ray address. One pipeline host actor runs per GPU of the cluster (or per
`--cpus-per-host` CPUs where there is none), spread over the nodes; the driver places the
config's cameras on them and keeps them running (see `driver`). Outputs must be on
storage every node sees (`outputs.dir`).

The driver also keeps a small named actor, `pipeline-control`, through which `pipeline
cluster add|remove` reach a running driver and `pipeline cluster status` reads its last
merged snapshot.
"""
from __future__ import annotations

import logging
import signal
import sys
import time

from pipeline.cluster.driver import ClusterDriver, HostState, default_call
from pipeline.cluster.host import PipelineHost
from pipeline.config import Config

log = logging.getLogger("pipeline.cluster")

NAMESPACE = "pipeline"
CONTROL = "pipeline-control"
INSTALL = "the cluster mode needs Ray: pip install 'pipeline[cluster]' (or pip install ray)"


class ControlMailbox:
    """Requests for a running driver, and its latest merged snapshot."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.latest: dict = {}

    def put(self, request: dict) -> int:
        self.requests.append(request)
        return len(self.requests)

    def take(self) -> list[dict]:
        out, self.requests = self.requests, []
        return out

    def publish(self, snapshot: dict) -> None:
        self.latest = snapshot

    def snapshot(self) -> dict:
        return self.latest


def import_ray():
    try:
        import ray
    except ImportError:
        raise SystemExit(f"error: {INSTALL}") from None
    return ray


def connect(address: str):
    ray = import_ray()
    if address == "local":
        ray.init(namespace=NAMESPACE, include_dashboard=False, logging_level=logging.WARNING)
    else:
        ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING)
    return ray


def start_hosts(ray, config: Config, max_frames: int | None, hosts: int | None, cpus_per_host: int) -> list[HostState]:
    """Pipeline host actors: one per GPU, or per `cpus_per_host` CPUs; spread over nodes."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    count = hosts or (gpus if gpus else max(1, int(resources.get("CPU", 1)) // cpus_per_host))
    options = {"num_cpus": cpus_per_host, "max_restarts": 0, "scheduling_strategy": "SPREAD"}
    if gpus:
        options["num_gpus"] = 1
    actor = ray.remote(PipelineHost)
    handles = [actor.options(name=f"pipeline-host-{i}", **options).remote(f"host{i}", config, cpus_per_host, max_frames)
               for i in range(count)]
    ready = ray.get([h.ready.remote() for h in handles])
    for info in ready:
        log.info("host %s ready on %s (pid %d)", info["host"], info["node"], info["pid"])
    return [HostState(info["host"], h, capacity=1000.0 * cpus_per_host, gpu=bool(gpus), node=info["node"])
            for info, h in zip(ready, handles)]


def run_cluster(config: Config, address: str, max_frames: int | None, hosts: int | None, cpus_per_host: int,
                report: str | None) -> int:
    from pipeline.metrics.report import cluster_summary

    ray = connect(address)
    mailbox = ray.remote(ControlMailbox).options(name=CONTROL, lifetime="non_detached").remote()
    host_states = start_hosts(ray, config, max_frames, hosts, cpus_per_host)
    driver = ClusterDriver(config, host_states, default_call)
    signals: list[int] = []

    def on_signal(signum: int, _frame) -> None:
        signals.append(signum)
        log.warning("%s: stopping the cameras on every host", signal.Signals(signum).name)

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, on_signal)
    driver.start()
    last_log = time.monotonic()
    while not signals and not driver.finished():
        time.sleep(driver.poll_s)
        driver.poll()
        for request in ray.get(mailbox.take.remote()):
            try:
                if request["op"] == "add":
                    driver.add([request["source"]])
                elif request["op"] == "remove":
                    driver.remove(request["camera"])
            except (ValueError, RuntimeError) as e:
                log.error("cluster %s: %s", request["op"], e)
        snap = driver.snapshot()
        mailbox.publish.remote(snap)
        if time.monotonic() - last_log >= config.metrics.log_interval_s:
            log.info("%d frames, %d/%d host(s) alive, %d camera(s) running", snap["processed"],
                     sum(h["alive"] for h in snap["hosts"].values()), len(snap["hosts"]),
                     sum(1 for st in driver.cameras.values() if not st.done))
            last_log = time.monotonic()
    finals = default_call([(h, "stop", (len(signals) > 1,)) for h in host_states if h.alive], timeout=120)
    for host, result in finals:
        if not isinstance(result, BaseException):
            host.status = result
    snap = driver.snapshot()
    snap["driver"] = {"polls": driver.polls, "work_s": round(driver.work_s, 4)}
    print(cluster_summary(snap))
    if report:
        import json

        with open(report, "w") as f:
            json.dump(snap, f, indent=2)
    ray.shutdown()
    if signals:
        return 130
    return 1 if snap["cameras"] and all(c["state"] == "failed" for c in snap["cameras"].values()) else 0


def cluster_command(args) -> int:
    """`pipeline cluster add|remove|status` against a running driver."""
    ray = connect(args.address)
    try:
        mailbox = ray.get_actor(CONTROL, namespace=NAMESPACE)
    except ValueError:
        print(f"error: no pipeline driver is running on the cluster at {args.address}", file=sys.stderr)
        return 2
    if args.action == "status":
        from pipeline.metrics.report import cluster_summary

        print(cluster_summary(ray.get(mailbox.snapshot.remote())))
    elif args.action == "add":
        ray.get(mailbox.put.remote({"op": "add", "source": args.source}))
        print(f"camera {args.source.id}: sent to the driver")
    else:
        ray.get(mailbox.put.remote({"op": "remove", "camera": args.camera}))
        print(f"camera {args.camera}: removal sent to the driver")
    return 0
