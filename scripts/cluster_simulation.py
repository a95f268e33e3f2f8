"""The driver at fleet size: N cameras (1080p, 15 fps) on as many hosts as the cost
model says they need, with stand-in hosts that answer like real ones (a real camera's
counters, one latency histogram each). Measures what the driver itself does per poll:
collecting the statuses, merging them into one snapshot, and, once, placing the cameras
of a host that died on the survivors. Ray's part (one small call per host per poll) is
counted as messages and bytes.

    .venv/bin/python scripts/cluster_simulation.py --camera-count 1000 --cores-per-host 32
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cluster.driver import ClusterDriver, HostGone, HostState, direct_call  # noqa: E402
from pipeline.cluster.placement import CameraLoad, CostModel, hosts_needed  # noqa: E402
from pipeline.cluster.status import HostStatus  # noqa: E402
from pipeline.config import parse_config  # noqa: E402
from pipeline.metrics.histogram import Histogram  # noqa: E402
from pipeline.metrics.snapshot import CameraSnapshot, Latency  # noqa: E402

CAMERA = CameraSnapshot(state="streaming", frames_in=54000, processed=53980, dropped={"queue_full": 20}, fps=15.0,
                        reconnects=1, downtime_s=2.3, latency=Latency(41.2, 63.0, 88.1, 44.0, 230.0),
                        counts={"gate": {"in": {"person": 120}, "out": {"person": 117}}})


class StandInHost:
    def __init__(self, name: str):
        self.name, self.cameras, self.dead = name, {}, False
        h = Histogram()
        for ms in range(20, 120):
            h.record(ms / 1000)
        self.hist = h

    def add(self, source, resume):
        self.cameras[source.id] = dataclasses.replace(CAMERA)

    def status(self):
        if self.dead:
            raise HostGone("node lost")
        return HostStatus(self.name, f"node-{self.name}", self.cameras, list(self.cameras), self.hist.counts.tolist(),
                          self.hist.total, self.hist.max, cpu_percent=640.0)




def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--camera-count", type=int, default=1000)
    ap.add_argument("--cores-per-host", type=int, default=32)
    ap.add_argument("--polls", type=int, default=20)
    args = ap.parse_args()
    model = CostModel()
    loads = [CameraLoad(f"cam{i}", 15, 1920 * 1080) for i in range(args.camera_count)]
    hosts_count = hosts_needed(loads, 1000.0 * args.cores_per_host, model)
    out_dir = tempfile.mkdtemp(prefix="cluster-sim-")
    config = parse_config({"sources": [{"id": c.camera, "uri": f"rtsp://10.0.{i // 250}.{i % 250}/s"}
                                       for i, c in enumerate(loads)],
                           "models": {"det": {"path": __file__, "layout": "yolox", "input_size": 416}},
                           "graph": [{"detect": {"model": "det"}}],
                           "outputs": {"dir": out_dir, "jsonl": {"filename": "{camera}.jsonl"}}}, Path(out_dir))
    stand_ins = [StandInHost(f"host{i}") for i in range(hosts_count)]
    driver = ClusterDriver(config, [HostState(s.name, s, 1000.0 * args.cores_per_host) for s in stand_ins],
                           direct_call, lambda host: None)
    t0 = time.perf_counter()
    driver.start()
    placing = time.perf_counter() - t0
    rounds, sizes = [], []
    for _ in range(args.polls):
        t0 = time.perf_counter()
        driver.poll()
        driver.snapshot()
        rounds.append(time.perf_counter() - t0)
        sizes.append(sum(len(json.dumps(dataclasses.asdict(h.status))) for h in driver.hosts.values()))
    stand_ins[0].dead = True
    moved = len(stand_ins[0].cameras)
    t0 = time.perf_counter()
    driver.poll()
    failover = time.perf_counter() - t0
    per_camera = loads[0].cost(model)
    print(f"{args.camera_count} cameras at 1080p 15 fps: {per_camera:.0f} ms of CPU per second each "
          f"({per_camera / 1000:.2f} cores, CPU-only cost model), {hosts_count} hosts of {args.cores_per_host} cores "
          f"at 75% load")
    print(f"placing every camera: {1000 * placing:.1f} ms")
    print(f"one poll (status of every host, merged into one snapshot): median {1000 * statistics.median(rounds):.1f} ms,"
          f" max {1000 * max(rounds):.1f} ms; {hosts_count} messages, {statistics.median(sizes) / 1e6:.2f} MB "
          f"per poll")
    print(f"a host lost: its {moved} cameras placed on the survivors and started in {1000 * failover:.1f} ms")
    print(f"driver share of one core at one poll per second: {100 * statistics.median(rounds):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
