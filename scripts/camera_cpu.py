"""What a camera costs, by thread, over one stretch of the density bench's clip.

N paced live cameras of a config (as `pipeline bench --density` sets them up), each thread's
CPU time (Linux `/proc/self/task`) read from `--at` seconds after the start for
`--seconds`, grouped by thread name (the cameras' threads together), in % of one core:
the total, per camera, and by group; and how often the threads went to sleep, a frame
(voluntary context switches: each wake costs CPU of its own); `--runs` runs, the median. On the made `1080p-idle`
clip (10 s still, 10 s of people walking, 10 s still) with the cameras in step, `--at 1.5
--seconds 8` is the quiet stretch and `--at 10.5 --seconds 9` the active one.

    python scripts/camera_cpu.py configs/density/gated.yaml --cameras 8 --at 1.5 --seconds 8 --runs 3
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import tempfile
import threading
import time

from pipeline.bench.camera_clips import clip_or_file
from pipeline.bench.density import cpu_s, with_density_cameras
from pipeline.config import load_config
from pipeline.graph import Pipeline

FPS = 15  # the density bench's cameras' rate


def thread_cpu() -> dict[int, float]:
    """CPU seconds of each of this process's threads, by native id (one that ended
    meanwhile left out)."""
    seconds = {int(tid): cpu_s(f"/proc/self/task/{tid}/stat") for tid in os.listdir("/proc/self/task")}
    return {tid: s for tid, s in seconds.items() if s is not None}


def switches() -> int:
    """Voluntary context switches of this process's threads so far (one that ended left out)."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except (OSError, StopIteration):
            pass
    return total


def one_run(args: argparse.Namespace, out: str) -> dict[str, float]:
    """% of a core by thread group over the stretch, "total", and "switches" a frame."""
    cfg = with_density_cameras(load_config(args.config), clip_or_file(args.clip), args.cameras, FPS,
                               clip_or_file(args.detect_clip), spread=args.spread).with_output_dir(out)
    p = Pipeline(cfg)
    p.start()
    try:
        time.sleep(args.at)
        before, slept, t0 = thread_cpu(), switches(), time.perf_counter()
        time.sleep(args.seconds)
        after, wall, slept = thread_cpu(), time.perf_counter() - t0, switches() - slept
        names = {t.native_id: t.name for t in threading.enumerate()}
    finally:
        p.stop()
        p.wait(30)
        p.close()
    groups: collections.Counter = collections.Counter()
    for tid, cpu in after.items():
        groups[re.sub(r"cam\d+", "camN", names.get(tid, "native (ONNX Runtime, FFmpeg)"))] += cpu - before.get(tid, 0)
    shares = {k: 100 * v / wall for k, v in groups.items()}
    shares["total"] = sum(shares.values())
    shares["switches"] = slept / (wall * FPS * args.cameras)
    return shares


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--cameras", type=int, default=8)
    ap.add_argument("--clip", default="1080p-idle", help="recorded main stream (a made clip's name or a file)")
    ap.add_argument("--detect-clip", default="360p-idle", help="the analysed sub-stream")
    ap.add_argument("--at", type=float, default=1.5, help="seconds after the start the stretch begins")
    ap.add_argument("--seconds", type=float, default=8.0, help="the stretch's length")
    ap.add_argument("--spread", action="store_true", help="the bench's spread scenario (else in step)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="camera-cpu-") as out:
            runs.append(one_run(args, out))
    median = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in set().union(*runs)}
    totals = ", ".join(f"{r['total']:.0f}" for r in runs)
    print(f"{args.cameras} camera(s), {args.at:g}-{args.at + args.seconds:g} s: {median['total']:.1f}% of a core "
          f"(runs: {totals}), {median['total'] / args.cameras:.1f}% per camera, "
          f"{median['switches']:.1f} voluntary context switches a frame")
    for name, share in sorted(median.items(), key=lambda kv: -kv[1]):
        if name not in ("total", "switches") and share >= 0.5:
            print(f"  {share:6.1f}%  {name}")


if __name__ == "__main__":
    main()
