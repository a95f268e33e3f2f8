"""Does a camera's memory grow with the time it has run? One looping, realtime file camera
with the config's graph (tracking by default) runs in this process for `--minutes`; the
process RSS (VmRSS) is sampled every `--interval` seconds. It prints the RSS when the
warm-up ends and at the end, and the least-squares slope after the warm-up in MiB per
minute; `--out` writes the samples as JSON.

A benchmark, not a test: the slope is what matters (a plain MP4 keeps every frame's index
entry until it is closed; time-segmented outputs bound that), and the machine's other load
shows as dropped frames, not as memory.

    python scripts/rss_soak.py --minutes 10 --out bench/rss_soak.json
    python scripts/rss_soak.py --set outputs.video.segment_s=5 --set outputs.retain.max_gb=0.05
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import Config, ConfigError, load_yaml, parse_config
from pipeline.graph import Pipeline

ROOT = Path(__file__).resolve().parent.parent


def rss_mib() -> float:
    """This process's resident memory (VmRSS), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def set_option(data: dict, assignment: str) -> None:
    """Apply `a.b.c=value` (value read as YAML; a number as a key indexes a list)."""
    path, sep, raw = assignment.partition("=")
    if not sep or not path:
        raise SystemExit(f"--set {assignment!r}: expected key.path=value")
    keys = path.split(".")
    node: Any = data
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = yaml.safe_load(raw)
    else:
        node[last] = yaml.safe_load(raw)


def soak_config(args: argparse.Namespace, out_dir: str) -> Config:
    """The config with its cameras looping at their frame rate, `--set` applied, and only
    the one camera kept."""
    data = load_yaml(args.config)
    data["sources"] = [{**s, "realtime": True, "loop": True} for s in data["sources"]]
    data.setdefault("outputs", {})["dir"] = out_dir
    for assignment in args.set:
        set_option(data, assignment)
    config = parse_config(data, Path(args.config).resolve().parent)
    return config.subset([args.camera or config.sources[0].id])


def slope_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of RSS over time, MiB per minute."""
    return statistics.linear_regression([t / 60 for t, _ in samples], [m for _, m in samples]).slope


def run(args: argparse.Namespace, out_dir: str) -> dict:
    try:
        config = soak_config(args, out_dir)
    except ConfigError as e:
        for p in e.problems:
            print(f"error: {p}", file=sys.stderr)
        raise SystemExit(2) from None
    pipeline = Pipeline(config)
    samples: list[tuple[float, float]] = []
    t0 = time.monotonic()
    pipeline.start()
    ended = False
    try:
        while (now := time.monotonic() - t0) < args.minutes * 60:
            samples.append((round(now, 1), round(rss_mib(), 2)))
            if pipeline.wait(min(args.interval, args.minutes * 60 - now)):
                ended = True  # a looping camera ends only when it fails
                break
        samples.append((round(time.monotonic() - t0, 1), round(rss_mib(), 2)))
    finally:
        pipeline.stop()
        pipeline.wait(30)
        pipeline.close()
    snap = pipeline.snapshot()
    camera = next(iter(snap.cameras.values()))
    return {"samples": samples, "ended_early": ended, "processed": snap.processed,
            "dropped": camera.dropped, "camera_state": camera.state,
            "files_left": len(os.listdir(out_dir)), "config_set": args.set}


def report(args: argparse.Namespace, result: dict) -> int:
    samples = result["samples"]
    after = [(t, m) for t, m in samples if t >= args.warmup * 60]
    if len(after) < 2:
        print(f"error: fewer than 2 samples after the {args.warmup:g}-minute warm-up", file=sys.stderr)
        return 1
    result.update(warmup_min=args.warmup, rss_warmup_end_mib=after[0][1], rss_end_mib=after[-1][1],
                  slope_mib_per_min=round(slope_per_min(after), 4),
                  machine={"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "python": platform.python_version()})
    print(f"RSS at warm-up end ({after[0][0] / 60:.1f} min): {after[0][1]:.2f} MiB; "
          f"at the end ({after[-1][0] / 60:.1f} min): {after[-1][1]:.2f} MiB; "
          f"slope after warm-up: {result['slope_mib_per_min']:+.3f} MiB/min over {len(after)} samples")
    print(f"frames processed: {result['processed']}, dropped: {result['dropped']}, "
          f"files in the output folder at the end: {result['files_left']}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result) + "\n")
    if result["ended_early"]:
        print(f"error: the camera ended before {args.minutes:g} minutes ({result['camera_state']})", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "tracking.yaml"),
                    help="the graph and models (default: configs/tracking.yaml)")
    ap.add_argument("--camera", help="the config's camera to loop (default: its first)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change the config, e.g. outputs.video.segment_s=5 (repeatable)")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0, help="minutes left out of the slope")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--out", help="write the samples and figures here as JSON")
    ap.add_argument("--keep-output", help="write the camera's outputs here (default: a temporary folder, deleted)")
    args = ap.parse_args()
    if not 0 <= args.warmup < args.minutes or args.interval <= 0:
        raise SystemExit("--warmup must be below --minutes, --interval above 0")
    out_dir = os.path.abspath(args.keep_output) if args.keep_output else tempfile.mkdtemp(prefix="rss-soak-")
    try:
        return report(args, run(args, out_dir))
    finally:
        if not args.keep_output:
            shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
