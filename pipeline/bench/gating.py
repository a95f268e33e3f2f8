"""Detecting only when something moves (`detect.fps`, `motion`) against detecting every
frame: the same clip and graph run both ways, the gated run twice (as fast as it goes,
and paced at the clip's rate: a slow run), and compared on what must agree:

- line crossings and zone entries per class within 5% (or 1) of the every-frame run's;
- every track of the every-frame run longer than 1 s found in the gated run (a box of
  its class over it, IoU at least 0.3, on at least half of its frames);
- the fast and the paced gated runs' JSON lines identical (decisions do not depend on
  the machine's speed);

and on what it saves: detector runs, and the process's CPU time per second of video;
`plot` charts the detector's runs per second of video over each clip, both ways.

    python scripts/gating_agreement.py --config configs/tracking.yaml CLIP [CLIP ...]
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from pipeline.config import Config, DetectSpec
from pipeline.decoders.nms import iou_matrix
from pipeline.metrics.snapshot import Snapshot

COUNTED = ("in", "out", "enter")  # the events that must agree
MIN_TRACK_S = 1.0
MATCH_IOU = 0.3


@dataclass
class Run:
    text: str            # its JSON lines
    snapshot: Snapshot
    cpu_s: float         # the process's CPU time from start to the last file written
    wall_s: float

    @property
    def rows(self) -> list[dict]:
        return [json.loads(line) for line in self.text.splitlines()]


def gated(config: Config, fps: float | None = 5.0, refresh_s: float = 10.0, regions: bool = False,
          border_s: float | None = None) -> Config:
    """The config with its detector gated by motion at `fps` (`border_s`: the config's own
    where None), for every camera: what is compared is what was asked for, whatever a
    camera's own overrides say."""
    def one(s: DetectSpec) -> DetectSpec:
        cameras = {c: replace(own, fps=None, motion=None, refresh_s=None, regions=None,
                              border_s=own.border_s if border_s is None else None) for c, own in s.cameras.items()}
        return replace(s, fps=fps, motion=True, refresh_s=refresh_s, regions=regions,
                       border_s=s.border_s if border_s is None else border_s, cameras=cameras)

    return replace(config, graph=[one(s) if isinstance(s, DetectSpec) else s for s in config.graph])


def run(config: Config, paced: bool = False) -> Run:
    """One run of `config` (its cameras paced at their frame rate with `paced`), JSON lines
    on, video off."""
    from pipeline.graph import Pipeline

    out = tempfile.mkdtemp(prefix="bench-gating-")
    sources = [replace(s, realtime=paced) for s in config.sources]
    outputs = replace(config.outputs, dir=out, video=replace(config.outputs.video, enabled=False),
                      jsonl=replace(config.outputs.jsonl, enabled=True, filename="detections.jsonl"))
    p = Pipeline(replace(config, sources=sources, outputs=outputs))
    t0, c0 = time.perf_counter(), os.times()
    p.start()
    try:
        p.wait()
    finally:
        p.close()
    c1 = os.times()
    with open(os.path.join(out, "detections.jsonl")) as f:
        text = f.read()
    return Run(text, p.snapshot(), (c1.user - c0.user) + (c1.system - c0.system), time.perf_counter() - t0)


def counts(snap: Snapshot) -> dict[tuple[str, str, str, str], int]:
    """(camera, line or zone, event, class) -> n, for the events that must agree."""
    return {(cam, name, event, cls): n for cam, c in snap.cameras.items() for name, events in c.counts.items()
            for event, per_class in events.items() if event in COUNTED for cls, n in per_class.items()}


def count_rows(every: Snapshot, gated_: Snapshot) -> list[tuple[tuple, int, int, bool]]:
    """Each counted event of either run: (key, every-frame n, gated n, within 5% or 1)."""
    a, b = counts(every), counts(gated_)
    return [(k, a.get(k, 0), b.get(k, 0), abs(a.get(k, 0) - b.get(k, 0)) <= max(1.0, 0.05 * a.get(k, 0)))
            for k in sorted(set(a) | set(b))]


def tracks(rows: list[dict], min_s: float = MIN_TRACK_S) -> dict[tuple[str, int], list[tuple[int, str, list]]]:
    """The tracks lasting at least `min_s`: (camera, id) -> [(seq, class, box)]."""
    seen: dict[tuple[str, int], list] = defaultdict(list)
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in rows:
        for d in r["detections"]:
            if "track" in d:
                key = (r["camera"], d["track"])
                seen[key].append((r["seq"], d["class"], d["box"]))
                times[key].append(r["time"] or 0.0)
    return {k: v for k, v in seen.items() if max(times[k]) - min(times[k]) >= min_s}


def found(every_rows: list[dict], gated_rows: list[dict], min_s: float = MIN_TRACK_S) -> tuple[int, int, list]:
    """How many of the every-frame run's tracks of at least `min_s` the gated run found,
    of how many, and the ones it missed."""
    boxes: dict[tuple[str, int], list[tuple[str, list]]] = {
        (r["camera"], r["seq"]): [(d["class"], d["box"]) for d in r["detections"]] for r in gated_rows}
    missed = []
    long = tracks(every_rows, min_s)
    for key, path in long.items():
        hits = 0
        for seq, cls, box in path:
            there = [b for c, b in boxes.get((key[0], seq), []) if c == cls]
            if there and iou_matrix(np.array([box], np.float32), np.array(there, np.float32)).max() >= MATCH_IOU:
                hits += 1
        if hits < 0.5 * len(path):
            missed.append(key)
    return len(long) - len(missed), len(long), missed


def runs_per_second(rows: list[dict]) -> dict[str, list[int]]:
    """Per camera, the detector's runs in each second of its time (from the JSON lines)."""
    out: dict[str, list[int]] = {}
    for r in rows:
        second = int(r["time"] or 0.0)
        counts = out.setdefault(r["camera"], [])
        counts.extend([0] * (second + 1 - len(counts)))
        counts[second] += bool(r["detected"])
    return out


def compare(every: Run, fast: Run, paced: Run, seconds: float) -> dict:
    """The agreement and the savings of one clip."""
    rows = count_rows(every.snapshot, fast.snapshot)
    got, total, missed = found(every.rows, fast.rows)
    runs = lambda r: sum(c.detector.runs for c in r.snapshot.cameras.values())  # noqa: E731
    return {"counts": [{"what": "/".join(k), "every": a, "gated": b, "ok": ok} for k, a, b, ok in rows],
            "counts_ok": all(ok for *_, ok in rows), "tracks_found": got, "tracks": total,
            "missed": [f"{c}#{t}" for c, t in missed], "deterministic": fast.text == paced.text,
            "detector_runs": {"every": runs(every), "gated": runs(fast)},
            "runs_per_s": {"every": runs_per_second(every.rows), "gated": runs_per_second(fast.rows)},
            "cpu_per_video_s": {"every": round(every.cpu_s / seconds, 3), "gated": round(fast.cpu_s / seconds, 3)}}


def agreement(config: Config, fps: float | None = 5.0, refresh_s: float = 10.0, regions: bool = False,
              border_s: float | None = None) -> dict:
    """Every-frame, gated and paced gated runs of `config`, compared."""
    every = run(config)
    fast = run(gated(config, fps, refresh_s, regions, border_s))
    paced = run(gated(config, fps, refresh_s, regions, border_s), paced=True)
    seconds = max((r["time"] or 0.0) for r in every.rows) or 1.0
    return compare(every, fast, paced, seconds)


def markdown(name: str, result: dict) -> list[str]:
    """The clip's rows of the README's table."""
    runs, cpu = result["detector_runs"], result["cpu_per_video_s"]
    bad = [f"{c['what']} {c['every']} vs {c['gated']}" for c in result["counts"] if not c["ok"]]
    return [f"| {name} | {runs['every']} / {runs['gated']} | {cpu['every']} / {cpu['gated']} | "
            f"{sum(c['every'] for c in result['counts'])} / {sum(c['gated'] for c in result['counts'])}"
            f"{' (' + '; '.join(bad) + ')' if bad else ''} | {result['tracks_found']} of {result['tracks']} | "
            f"{'yes' if result['deterministic'] else 'NO'} |"]


def plot(results: dict[str, dict], path: str) -> None:
    """One chart per clip: the detector's runs per second of video, every frame and gated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 2.6 * len(results)), squeeze=False)
    for ax, (clip, result) in zip(axes[:, 0], results.items()):
        for way, style in (("every", ":"), ("gated", "-")):
            for camera, counts in result["runs_per_s"][way].items():
                ax.step(range(len(counts)), counts, where="post", linestyle=style,
                        label=f"{camera}: {'every frame' if way == 'every' else 'gated'}")
        ax.set_title(os.path.basename(clip), fontsize=10)
        ax.set_ylabel("detector runs / s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="upper right")
    axes[-1, 0].set_xlabel("seconds of video")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
