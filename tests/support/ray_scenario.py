"""A cluster run on a local 2-node Ray cluster (1 CPU each), for the cluster tests; run in
a private network namespace (Ray binds every interface):

    unshare -n sh -c 'ip link set lo up; python ray_scenario.py CONFIG RESULT [--hang-after N | --crash-after N]'

Starts the cluster, two pipeline hosts (one per node), places the config's cameras with
the real driver, optionally freezes (SIGSTOP, as a hung machine) or kills (SIGKILL, as a
crash) the first host's process once the cameras took in N frames, runs to the end and writes the
driver's final snapshot (and what it saw) to RESULT as JSON.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipeline.cluster.driver import ClusterDriver  # noqa: E402
from pipeline.cluster.ray_run import connect, kill_host, ray_call, start_hosts  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.cluster.checks import cluster_problems  # noqa: E402


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("result")
    ap.add_argument("--hang-after", type=int, help="SIGSTOP the first host once the cameras took in this many frames")
    ap.add_argument("--crash-after", type=int, help="SIGKILL the first host once the cameras took in this many frames")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--max-frames", type=int)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    import ray
    from ray.cluster_utils import Cluster

    t0 = time.time()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(args.hosts - 1):
        cluster.add_node(num_cpus=1)
    config, problems = cluster_problems(load_config(args.config))
    assert not problems, problems
    connect(cluster.address)
    hosts = start_hosts(ray, config, args.max_frames, args.hosts, 1)
    pid = ray.get(hosts[0].handle.ready.remote())["pid"]
    driver = ClusterDriver(config, hosts, ray_call, kill_host, poll_s=0.5, host_timeout_s=3.0)
    started = time.time()
    driver.start()
    hung_at = lost_at = None
    while not driver.finished() and time.time() - started < 240:
        time.sleep(driver.poll_s)
        driver.poll()
        # frames the cameras took in, processed or not: a loaded machine drops most of a live
        # camera's frames, and the host must still fail while its cameras run
        done = sum(c.frames_in for h in driver.hosts.values() if h.status for c in h.status.cameras.values())
        after = args.hang_after or args.crash_after
        if after and hung_at is None and done >= after:
            os.kill(pid, signal.SIGSTOP if args.hang_after else signal.SIGKILL)
            hung_at = time.time()
        if hung_at and lost_at is None and not driver.hosts[hosts[0].name].alive:
            lost_at = time.time()
    finals = ray_call([(h, "stop", (False,)) for h in hosts if h.alive], 120)
    for host, status in finals:
        if not isinstance(status, BaseException):
            host.status = status
    time.sleep(1.0)
    # Ray ends a frozen actor's process seconds after `ray.kill` (its writers are fenced
    # meanwhile): on a loaded machine the run can end first
    deadline = time.time() + 30
    while hung_at and alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    snap = driver.snapshot().to_dict()
    snap.update(finished=driver.finished(), took_s=round(time.time() - started, 2),
                cluster_up_s=round(started - t0, 2), hung_at_s=round(hung_at - started, 2) if hung_at else None,
                detected_after_s=round(lost_at - hung_at, 2) if lost_at and hung_at else None,
                hung_host_alive=alive(pid), placement={c: st.host for c, st in driver.cameras.items()},
                nodes=sorted({h.node for h in hosts}), driver_work_s=round(driver.work_s, 4), polls=driver.polls)
    Path(args.result).write_text(json.dumps(snap, indent=2))
    ray.shutdown()
    cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
