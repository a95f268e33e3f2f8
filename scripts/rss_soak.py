"""Does a camera's memory grow with the time it has run? One looping, realtime file camera
with the config's graph (tracking by default) runs in this process for `--minutes`; the
process RSS (VmRSS) is sampled every `--interval` seconds, with the frames waiting in the
run's queues and the machine's load average (what the memory carries at that moment). It
prints the RSS when the warm-up ends and at the end, the range (highest less lowest) and
the least-squares slope after the warm-up; `--out` writes the samples as JSON, `--plot`
draws them as a PNG.

A benchmark, not a test: the slope is what matters (a plain MP4 keeps every frame's index
entry until it is closed; time-segmented outputs bound that); the machine's other load
shows as dropped frames, and as frames waiting in the queues, which the memory holds.

    python scripts/rss_soak.py --minutes 10 --out bench/rss_soak.json
    python scripts/rss_soak.py --set outputs.video.segment_s=5 --set outputs.retain.max_gb=0.05
    python scripts/rss_soak.py --minutes 30 --out bench/x.json --plot bench/x.png
    python scripts/rss_soak.py --replot bench/x.json --plot bench/x.png
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
    load: list[tuple[float, int, float]] = []  # (time, frames waiting in the run's queues, the machine's load average)
    t0 = time.monotonic()
    pipeline.start()
    ended = False
    try:
        while (now := time.monotonic() - t0) < args.minutes * 60:
            samples.append((round(now, 1), round(rss_mib(), 2)))
            queued = sum(q.depth for q in pipeline.snapshot().queues.values())
            load.append((round(now, 1), queued, round(os.getloadavg()[0], 2)))
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
    return {"samples": samples, "load": load, "ended_early": ended, "processed": snap.processed,
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
                  range_after_warmup_mib=round(max(m for _, m in after) - min(m for _, m in after), 2),
                  machine=result.get("machine") or {"cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                                                    "python": platform.python_version()})
    print(f"RSS at warm-up end ({after[0][0] / 60:.1f} min): {after[0][1]:.2f} MiB; "
          f"at the end ({after[-1][0] / 60:.1f} min): {after[-1][1]:.2f} MiB; "
          f"range after warm-up: {result['range_after_warmup_mib']:.2f} MiB; "
          f"slope after warm-up: {result['slope_mib_per_min']:+.3f} MiB/min over {len(after)} samples")
    print(f"frames processed: {result['processed']}, dropped: {result['dropped']}, "
          f"files in the output folder at the end: {result['files_left']}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result) + "\n")
    if args.plot:
        plot(result, args.plot)
    if result["ended_early"]:
        print(f"error: the camera ended before {args.minutes:g} minutes ({result['camera_state']})", file=sys.stderr)
        return 1
    return 0


def plot(result: dict, path: str) -> None:
    """RSS over the run, the warm-up shaded, the range and slope after it in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [t / 60 for t, _ in result["samples"]]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(minutes, [m for _, m in result["samples"]], marker=".", markersize=3, linewidth=1)
    ax.axvspan(0, result["warmup_min"], color="0.9", label=f"warm-up ({result['warmup_min']:g} min)")
    ax.set_xlabel("minutes")
    ax.set_ylabel("process RSS (MiB)")
    ax.set_title(f"after warm-up: range {result['range_after_warmup_mib']:.2f} MiB, "
                 f"slope {result['slope_mib_per_min']:+.4f} MiB/min ({' '.join(result['config_set'])})", fontsize=9)
    if result.get("load"):  # what the memory carries at the moment: frames waiting in the queues
        queued = ax.twinx()
        queued.plot([t / 60 for t, _, _ in result["load"]], [n for _, n, _ in result["load"]], color="0.6",
                    linewidth=0.8, label="frames waiting in the queues (right)")
        queued.plot([t / 60 for t, _, _ in result["load"]], [la for _, _, la in result["load"]], color="tab:orange",
                    linewidth=0.8, label="machine load average, 1 min (right)")
        queued.set_ylabel("frames waiting / load average")
        queued.legend(fontsize=8, loc="lower right")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


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
    ap.add_argument("--plot", help="draw the samples here as a PNG (needs matplotlib)")
    ap.add_argument("--keep-output", help="write the camera's outputs here (default: a temporary folder, deleted)")
    ap.add_argument("--replot", metavar="JSON", help="no run: report and draw the samples of a run written by --out")
    args = ap.parse_args()
    if args.replot:
        return report(args, json.loads(Path(args.replot).read_text()))
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
