"""The cluster layer's cost: the same file cameras in one process and on two pipeline
hosts of a local 2-node Ray cluster (1 CPU each) on this machine, repeated; prints the
throughputs and their median ratio. Run it in a private network namespace (Ray binds
every interface): `make bench-cluster`, or

    unshare -n sh -c 'ip link set lo up; .venv/bin/python scripts/cluster_bench.py configs/bench.yaml'
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.bench.runner import with_cameras, without_classifier  # noqa: E402
from pipeline.cluster.driver import ClusterDriver  # noqa: E402
from pipeline.cluster.ray_run import connect, kill_host, ray_call, start_hosts  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.graph import Pipeline  # noqa: E402
from pipeline.cluster.checks import cluster_problems  # noqa: E402


def one_process(config, frames: int | None) -> float:
    p = Pipeline(config.with_output_dir(tempfile.mkdtemp(prefix="cluster-bench-")), max_frames=frames)
    t0 = time.perf_counter()
    p.start()
    p.wait()
    took = time.perf_counter() - t0
    p.close()
    return p.snapshot().processed / took


def two_hosts(ray, config, frames: int | None) -> float:
    config = config.with_output_dir(tempfile.mkdtemp(prefix="cluster-bench-"))
    hosts = start_hosts(ray, config, frames, 2, 1)
    driver = ClusterDriver(config, hosts, ray_call, kill_host, poll_s=0.2)
    t0 = time.perf_counter()
    driver.start()
    while not driver.finished():
        time.sleep(driver.poll_s)
        driver.poll()
    took = time.perf_counter() - t0
    processed = driver.snapshot().processed
    for h in hosts:
        ray.kill(h.handle)
    return processed / took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--camera-count", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--frames", type=int, help="at most this many frames per camera (default: the whole clips)")
    args = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    config = without_classifier(with_cameras(load_config(args.config), args.camera_count))
    config, _ = cluster_problems(config)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    connect(cluster.address)
    rows = []
    for _ in range(args.repeats):
        rows.append({"one process": round(one_process(config, args.frames), 1),
                     "two hosts": round(two_hosts(ray, config, args.frames), 1)})
        rows[-1]["ratio"] = round(rows[-1]["two hosts"] / rows[-1]["one process"], 3)
        print(json.dumps(rows[-1]), flush=True)
    median = statistics.median(r["ratio"] for r in rows)
    print(f"{args.camera_count} file cameras: two hosts / one process, median of {args.repeats}: {median:.3f}")
    ray.shutdown()
    cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
