"""`pipeline bench --density CLIP`: how many cameras the machine holds.

Every camera plays the clip as a live camera would send it (paced at its frame rate,
looped, each a different fraction of a frame late, its lane keeping its newest frame so
that a camera the machine cannot keep up with drops frames rather than queueing them),
set up like the config's first source. A level of N cameras runs `seconds`, then drains;
it is judged from its first 5 s on (a quarter of shorter levels: sessions and threads
settling), and *held* when, over all its cameras, under 1% of the frames decoded were
dropped (frames skipped on purpose by `stride` / `max_fps` not counted), the P99 latency (from a
frame's due time to its outputs written) is under 1 s, and every output is complete: no
output failed and the JSON lines hold a row for every frame processed. The search steps
the camera count up (1, 2, 4, ...) until a level is not held, then bisects between the
last level held and it.

Two scenarios, both reported: *in step*, every camera plays the clip from its start, so
their active stretches coincide (the worst case), and *spread*, camera i plays it started at
a keyframe spread over its length (`camera_clips.started_at`, golden-ratio steps), so their
activity does not coincide (the common case of cameras that see different places).

The search runs for the config as given and, beside it in turns, for the same graph and
models with today's default outputs (the annotated video at the camera's size and rate,
JSON lines): per scenario, `runs` rounds, each figure's median reported with every round's.

`watched` (`--watched K`): each level serves the live page (`outputs.web`, over processes
the run's own server relaying to the hosts) and another process reads the live video of
K of its cameras, every fragment and record, as K tiles of a page would
(`bench.watcher`): what the cameras held costs when an operator watches them.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from typing import Callable

import av
import numpy as np

from pipeline.bench.camera_clips import started_at
from pipeline.config import Config, OutputsConfig, QueueConfig
from pipeline.config.outputs import WebConfig

log = logging.getLogger("pipeline.bench")

MAX_DROPPED = 0.01
WARMUP_S = 5.0  # a level is judged from then on
MAX_P99_MS = 1000.0
GOLDEN = 0.618033988749895


SCENARIOS = ("spread", "in step")


def clip_length(clip: str) -> float:
    """The clip's video length in seconds."""
    with av.open(clip) as c:
        stream = c.streams.video[0]
        return float(stream.duration * stream.time_base) if stream.duration else float(c.duration or 0) / 1e6


def with_density_cameras(config: Config, clip: str, n: int, fps: float, detect_clip: str | None = None,
                         spread: bool = False) -> Config:
    """`n` paced live cameras of `clip`, set up like the config's first source; with
    `detect_clip`, each analyses that clip as its sub-stream (`detect_uri`) and records `clip`;
    `spread`: camera i plays both started at its point of the clip (`camera_clips.started_at`)."""
    template = config.sources[0]
    length = clip_length(clip) if spread else 0.0
    sources = []
    for i in range(n):
        uri, sub = clip, detect_clip or template.detect_uri
        if spread:  # golden-ratio steps over the clip: any number of cameras spread evenly
            start = (i * GOLDEN) % 1.0 * length
            uri, sub = started_at(clip, start), (started_at(sub, start) if sub else None)
        sources.append(replace(template, id=f"cam{i}", uri=uri, detect_uri=sub, live=True, realtime=True, loop=True,
                               queue=QueueConfig(size=1, policy="drop_oldest"), phase_s=(i * GOLDEN) % 1.0 / fps))
    return replace(config, sources=sources)


def with_default_outputs(config: Config) -> Config:
    """The same graph and models with today's default outputs."""
    return replace(config, outputs=OutputsConfig(dir=config.outputs.dir))


def jsonl_rows(folder: str) -> dict[str, int]:
    """Rows per camera in every JSON lines file of an output folder."""
    rows: dict[str, int] = {}
    for path in glob.glob(os.path.join(folder, "**", "*.jsonl"), recursive=True):
        with open(path) as f:
            for line in f:
                cam = json.loads(line)["camera"]
                rows[cam] = rows.get(cam, 0) + 1
    return rows


def incomplete(config: Config, snap, folder: str) -> list[str]:
    """What a level's outputs lack (empty: complete)."""
    problems = [f"{cam}: {output} failed" for cam, c in snap.cameras.items() for output in c.output_errors]
    if config.outputs.jsonl.enabled:
        rows = jsonl_rows(folder)
        short = [cam for cam, c in snap.cameras.items() if rows.get(cam, 0) != c.processed]
        if short:
            problems.append(f"JSON lines short for {', '.join(sorted(short))}")
    return problems


def cpu_s(stat: str) -> float | None:
    """User + system CPU seconds so far of a process or thread, from its `/proc/.../stat`
    (None: gone, or not Linux)."""
    try:
        with open(stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_s() -> float | None:
    """CPU seconds the whole machine has been busy (Linux `/proc/stat`; None elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _runner(config: Config, processes: int):
    """One process's `Pipeline` (its latency timeline kept), or `processes` host processes."""
    if processes > 1:
        from pipeline.cluster.checks import processes_problems
        from pipeline.cluster.process_run import ProcessRun

        config, problems = processes_problems(config)
        if problems:  # the caller checked the config first
            raise ValueError("; ".join(problems))
        return ProcessRun(config, processes)
    from pipeline.graph import Pipeline

    return Pipeline(config, timeline=True)


def _cpu_s(runner) -> float:
    """CPU seconds this process and the runner's host processes (if any) have used."""
    t = os.times()
    return t.user + t.system + sum(cpu_s(f"/proc/{pid}/stat") or 0.0 for pid in getattr(runner, "pids", list)())


def watching(runner, cameras: list[str]) -> subprocess.Popen:
    """A viewer process reading the live video of `cameras` from the runner's page."""
    from pipeline.cluster.processes import child_env

    web = getattr(runner, "front", None) or runner.side.web
    return subprocess.Popen([sys.executable, "-m", "pipeline.bench.watcher", str(web.port), *cameras],
                            stdout=subprocess.PIPE, text=True, env=child_env())


def watched_counts(viewer: subprocess.Popen) -> dict:
    """What the viewer received (its JSON line), once stopped."""
    viewer.send_signal(signal.SIGTERM)
    try:
        out, _ = viewer.communicate(timeout=10)
        return json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        viewer.kill()
        viewer.wait()
        return {}


def run_level(config: Config, clip: str, n: int, fps: float, seconds: float, detect_clip: str | None = None,
              spread: bool = False, processes: int = 1, watched: int = 0) -> dict:
    """One level: `n` cameras for `seconds`, drained, judged on what came after its first
    `warm-up` seconds (sessions, threads and the cameras' first frames settling);
    `processes`: the cameras spread over that many host processes (`run --processes`),
    judged on their whole run's latency (the hosts report no timeline); `watched`: the
    live video of that many of them read by another process (`watching`)."""
    folder = tempfile.mkdtemp(prefix="bench-density-")
    viewer = None
    try:
        cfg = with_density_cameras(config, clip, n, fps, detect_clip, spread).with_output_dir(folder)
        if watched:
            cfg = replace(cfg, outputs=replace(cfg.outputs, web=WebConfig(port=0)))
        p = _runner(cfg, processes)
        warmup = min(WARMUP_S, seconds / 4)
        cpu0, busy0, early = _cpu_s(p), busy_s(), None
        t0 = time.perf_counter()
        p.start()
        if watched:
            viewer = watching(p, [s.id for s in cfg.sources[:watched]])
        while not p.wait(0.2):
            if processes == 1:
                p.metrics.sample_process()
            if early is None and time.perf_counter() - t0 >= warmup:
                early = p.snapshot()
            if time.perf_counter() - t0 >= seconds:
                p.stop()
        wall = time.perf_counter() - t0
        cpu1, busy1 = _cpu_s(p), busy_s()
        seen = watched_counts(viewer) if viewer is not None else None
        p.close()
        snap = p.snapshot()
        ours = cpu1 - cpu0
        others = None if busy0 is None or busy1 is None else max(0.0, busy1 - busy0 - ours) / wall
        settled = None if processes > 1 else [lat for t, lat in p.metrics.timeline or [] if t - t0 >= warmup]
        return {**judge(cfg, snap, folder, n, wall, ours, others, early, settled),
                **({"watched": seen} if seen is not None else {})}
    finally:
        if viewer is not None and viewer.poll() is None:
            viewer.kill()
            viewer.wait()
        shutil.rmtree(folder, ignore_errors=True)


def lost(snap, early) -> tuple[int, int]:
    """Frames decoded and dropped (not on purpose) since `early` (None: since the start)."""
    def counts(s) -> tuple[int, int]:
        if s is None:
            return 0, 0
        return (sum(c.frames_in for c in s.cameras.values()),
                sum(v for c in s.cameras.values() for v in c.dropped.values()))
    (d1, x1), (d0, x0) = counts(snap), counts(early)
    return d1 - d0, x1 - x0


def judge(config: Config, snap, folder: str, n: int, wall: float, cpu_s: float, others: float | None,
          early=None, settled: list[float] | None = None) -> dict:
    """The level's figures; `others`: cores the rest of the machine kept busy meanwhile;
    `early`, `settled`: the snapshot after the warm-up and the latencies (s) of the frames
    written after it (None: the whole run)."""
    decoded, dropped = lost(snap, early)
    fraction = dropped / decoded if decoded else 1.0
    p50, p99 = ((round(float(np.percentile(settled, q)) * 1000, 2) for q in (50, 99)) if settled
                else (snap.latency.p50_ms, snap.latency.p99_ms))
    why = incomplete(config, snap, folder)
    if fraction >= MAX_DROPPED:
        why.append(f"{100 * fraction:.1f}% dropped")
    if p99 is None or p99 >= MAX_P99_MS:
        why.append(f"P99 {p99} ms")
    return {"cameras": n, "held": not why, "why": "; ".join(why), "decoded": decoded, "processed": snap.processed,
            "dropped": round(fraction, 4), "p50_ms": p50, "p99_ms": p99,
            "cpu_percent": round(100 * cpu_s / wall, 1) if wall else None,
            "others_cores": None if others is None else round(others, 2)}


Level = Callable[[int], dict]


def search(level: Level, limit: int = 64) -> dict:
    """The largest camera count held: doubling from 1 until a level fails, then bisecting."""
    levels: list[dict] = []

    def held(n: int) -> bool:
        r = level(n)
        levels.append(r)
        log.info("density: %d camera(s): %s%s (dropped %.1f%%, P99 %s ms, CPU %s%%)", n,
                 "held" if r["held"] else "not held", f" ({r['why']})" if r["why"] else "", 100 * r["dropped"],
                 r["p99_ms"], r["cpu_percent"])
        return r["held"]

    lo, hi = 0, None
    n = 1
    while n <= limit:
        if not held(n):
            hi = n
            break
        lo, n = n, 2 * n
    if hi is None:
        return {"held": lo, "levels": levels, "at_limit": True}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if held(mid):
            lo = mid
        else:
            hi = mid
    return {"held": lo, "levels": levels}


def bench_density(config: Config, clip: str, fps: float, seconds: float, runs: int = 1, limit: int = 64,
                  detect_clip: str | None = None, scenarios: tuple[str, ...] = SCENARIOS, processes: int = 1,
                  watched: int = 0) -> dict:
    """Per scenario, the search for the config as given and with today's default outputs,
    in turns (`detect_clip`: every camera's sub-stream, in both; `processes`: the cameras
    spread over that many host processes; `watched`: the live video of that many cameras
    read). Results are keyed "<scenario>: <design>"."""
    designs = {"as configured": config, "default outputs": with_default_outputs(config)}
    turns = {f"{scenario}: {name}": (scenario, cfg) for scenario in scenarios for name, cfg in designs.items()}
    rounds: dict[str, list[dict]] = {key: [] for key in turns}
    for r in range(runs):
        for key, (scenario, cfg) in turns.items():
            log.info("density: round %d of %d, %s", r + 1, runs, key)
            rounds[key].append(search(lambda n: run_level(cfg, clip, n, fps, seconds, detect_clip,
                                                          scenario == "spread", processes, watched), limit))
    held = {key: statistics.median(s["held"] for s in rs) for key, rs in rounds.items()}
    ratio = {scenario: round(held[f"{scenario}: as configured"] / held[f"{scenario}: default outputs"], 2)
             if held[f"{scenario}: default outputs"] else None for scenario in scenarios}
    return {"clip": clip, "detect_clip": detect_clip, "fps": fps, "seconds": seconds, "runs": runs, "processes": processes,
            "watched": watched, "scenarios": list(scenarios), "held": held, "ratio": ratio, "rounds": rounds}


def table(result: dict) -> str:
    sub = result.get("detect_clip")
    head = (f"{os.path.basename(result['clip'])}" + (f" (analysing {os.path.basename(sub)})" if sub else "")
            + f" at {result['fps']:g} fps, {result['seconds']:g} s per level, median of {result['runs']}"
            + (f", cameras spread over {result['processes']} processes" if result.get("processes", 1) > 1 else "")
            + (f", the live video of {result['watched']} watched" if result.get("watched") else "")
            + ", held:")
    lines = [head]
    for scenario in result["scenarios"]:
        mine, base = result["held"][f"{scenario}: as configured"], result["held"][f"{scenario}: default outputs"]
        ratio = result["ratio"][scenario]
        lines.append(f"- {scenario}: {mine:g} cameras as configured, {base:g} with default outputs"
                     + (f" ({ratio}x)" if ratio else ""))
    lines += ["", "| scenario: design | round | cameras | held | dropped | p50 ms | p99 ms | CPU % | others' cores "
                  "| why not |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for name, rounds in result["rounds"].items():
        for i, s in enumerate(rounds):
            for lv in s["levels"]:
                lines.append(f"| {name} | {i + 1} | {lv['cameras']} | {'yes' if lv['held'] else 'no'} | "
                             f"{100 * lv['dropped']:.1f}% | {lv['p50_ms']} | {lv['p99_ms']} | {lv['cpu_percent']} | "
                             f"{lv['others_cores']} | {lv['why']} |")
    return "\n".join(lines)
