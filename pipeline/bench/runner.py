"""`pipeline bench`: the synchronous baseline, the pipeline and the machine's limit, on the
same clips and models in one run, as one table plus JSON, Markdown and a PNG plot.

Cases: `detector` (the config's graph without classifiers) and, when the config has a
classify stage, `classifier`. Cameras are the config's sources repeated to `--camera-count`.
`--live` paces every camera at its frame rate and adds cameras until the load exceeds
the limit: it measures latency under overload (flat with drop_oldest, growing for the
baseline's unbounded buffering). `--load-sweep` measures the whole latency-load curve
of the tuned loop and the pipeline (`bench.sweep`). `--density CLIP` runs only the search
for the most cameras the machine holds (`bench.density`).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import tempfile
import time
from dataclasses import asdict, replace

import onnxruntime as ort

from pipeline.bench import camera_clips, density, sweep, web
from pipeline.bench.baseline import percentile_series, run_baseline
from pipeline.bench.limit import measure_costs
from pipeline.config import ClassifySpec, Config, QueueConfig, TrackSpec, load_config
from pipeline.runtime.threads import cpu_name

log = logging.getLogger("pipeline.bench")


def with_cameras(config: Config, n: int, live: bool = False, policy: str = "drop_oldest") -> Config:
    """The config's cameras repeated to `n`; `live`: paced and looped, as live cameras."""
    base = config.sources
    sources = []
    for i in range(n):
        s = replace(base[i % len(base)], id=f"cam{i}")
        if live:
            s = replace(s, live=True, realtime=True, loop=True, queue=QueueConfig(size=1, policy=policy),
                        phase_s=(i * 0.618033988749895) % 1.0 / _rate(s.uri))
        sources.append(s)
    return replace(config, sources=sources)


def without_classifier(config: Config) -> Config:
    return replace(config, graph=[s for s in config.graph if not isinstance(s, ClassifySpec)])


def per_track(config: Config) -> Config:
    """The classifier graph with a tracker in front: each vehicle classified once per track."""
    graph = [s for s in config.graph if not isinstance(s, TrackSpec)]
    at = next(i for i, s in enumerate(graph) if isinstance(s, ClassifySpec))
    graph.insert(at, TrackSpec(path="graph[track]"))
    graph = [replace(s, per_track=True) if isinstance(s, ClassifySpec) else s for s in graph]
    return replace(config, graph=graph)


def apply_sweep(config: Config, key: str, value: str) -> Config:
    model = config.detector
    if key in ("max_batch", "max_wait_ms"):
        model = replace(model, batching=replace(model.batching, **{key: type(getattr(model.batching, key))(value)}))
    elif key in ("max_inflight", "workers", "intra_op_threads", "idle_intra_op_threads"):
        model = replace(model, engine=replace(model.engine, **{key: int(value)}))
    elif key == "mode":
        model = replace(model, engine=replace(model.engine, mode=value))
    else:
        raise SystemExit(f"bench: cannot sweep {key!r} (max_batch, max_wait_ms, max_inflight, workers, "
                         f"intra_op_threads, idle_intra_op_threads, mode)")
    return replace(config, models={**config.models, model.name: model})


def run_pipeline(config: Config, frames: int, live: bool = False, seconds: float = 0.0) -> dict:
    """Run the pipeline: `frames` per camera, or in `live` mode for `seconds` then drain.
    It writes the annotated videos as the baseline does, and no JSON lines (the baseline
    writes none): both do the same work per frame."""
    from pipeline.graph import Pipeline

    cfg = config.with_output_dir(tempfile.mkdtemp(prefix="bench-pipeline-"))
    cfg = replace(cfg, outputs=replace(cfg.outputs, jsonl=replace(cfg.outputs.jsonl, enabled=False)))
    p = Pipeline(cfg, max_frames=None if live else frames, timeline=live)
    cpu0, t0 = os.times(), time.perf_counter()
    p.start()
    while not p.wait(0.1):
        p.metrics.sample_process()
        if live and time.perf_counter() - t0 >= seconds:
            p.stop()
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    p.close()
    snap = p.snapshot()
    used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    dropped = sum(c.dropped_total for c in snap.cameras.values())
    result = {"processed": snap.processed, "wall_s": round(wall, 3),
              "throughput_fps": round(snap.processed / wall, 2), "latency": asdict(snap.latency),
              "cpu_percent": round(100 * used / wall, 1), "max_threads": snap.max_threads,
              "thread_plan": p.plan.total, "dropped": dropped,
              "mean_batch": {k: v.mean_batch for k, v in snap.engines.items()}}
    if live and p.metrics.timeline is not None:
        result["p99_over_time"] = percentile_series(p.metrics.timeline, t0)
    return result


def bench_case(name: str, config: Config, frames: int, sweeps: list[tuple[str, list[str]]]) -> dict:
    log.info("case %s: measuring the per-stage limit", name)
    limit = measure_costs(config, frames)
    rows = {}
    log.info("case %s: sync baseline (default session options)", name)
    rows["sync baseline"] = run_baseline(config, frames, tuned=False)
    log.info("case %s: sync baseline (intra_op_num_threads=1)", name)
    rows["sync baseline, tuned"] = run_baseline(config, frames, tuned=True)
    log.info("case %s: pipeline", name)
    rows["pipeline"] = run_pipeline(config, frames)
    for key, values in sweeps:
        for v in values:
            log.info("case %s: pipeline %s=%s", name, key, v)
            rows[f"pipeline {key}={v}"] = run_pipeline(apply_sweep(config, key, v), frames)
    base = rows["sync baseline"]["throughput_fps"]
    for r in rows.values():
        r["vs_baseline"] = round(r["throughput_fps"] / base, 2) if base else None
        r["of_limit"] = round(r["throughput_fps"] / limit["limit_fps"], 3)
    return {"cameras": len(config.sources), "frames_per_camera": frames, "limit": limit, "rows": rows}


def bench_live(config: Config, seconds: float) -> dict:
    """Overload: enough paced cameras to exceed the limit by half."""
    limit = measure_costs(config)
    fps = [float(_rate(s.uri)) for s in config.sources]
    per_camera = sum(fps) / len(fps)
    cameras = max(len(config.sources), math.ceil(1.5 * limit["limit_fps"] / per_camera))
    live_cfg = with_cameras(config, cameras, live=True)
    blocking = with_cameras(config, cameras, live=True, policy="block")
    log.info("live: %d cameras x %.0f fps = %.0f fps offered, limit %.0f fps", cameras, per_camera,
             cameras * per_camera, limit["limit_fps"])
    timeline: list = []
    t0 = time.perf_counter()
    base = run_baseline(live_cfg, 0, tuned=True, live=True, timeline=timeline, seconds=seconds)
    base["p99_over_time"] = percentile_series(timeline, t0)
    pipe = run_pipeline(live_cfg, 0, live=True, seconds=seconds)
    block = run_pipeline(blocking, 0, live=True, seconds=seconds)
    return {"cameras": cameras, "offered_fps": round(cameras * per_camera, 1), "limit": limit,
            "rows": {"sync baseline, tuned (live)": base, "pipeline (live, drop_oldest)": pipe,
                     "pipeline (live, block)": block},
            "p99_ratio": round(pipe["latency"]["p99_ms"] / base["latency"]["p99_ms"], 3)
            if base["latency"]["p99_ms"] else None}


def _rate(uri: str) -> float:
    import av

    with av.open(uri) as c:
        return float(c.streams.video[0].average_rate or 25)


def table(results: dict) -> str:
    lines = []
    for case, res in results["cases"].items():
        if case == "load sweep":
            lines += [f"### {case}", "", sweep.table(res), ""]
            continue
        if case == "live view":
            lines += [f"### {case}", "", web.table(res), ""]
            continue
        lim = res["limit"]
        span = (f"{res['frames_per_camera']} frames each" if "frames_per_camera" in res
                else f"{res['offered_fps']} fps offered, paced")
        lines.append(f"### {case}: {res['cameras']} cameras, {span}; "
                     f"limit {lim['limit_fps']} fps ({lim['total_ms']} ms/frame on {lim['cores']} cores)")
        lines.append("")
        lines.append("| mode | fps | p50 ms | p99 ms | CPU % | threads | dropped | x baseline | of limit |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in res["rows"].items():
            lat = r["latency"]
            lines.append(f"| {name} | {r['throughput_fps']} | {lat['p50_ms']} | {lat['p99_ms']} | {r['cpu_percent']} "
                         f"| {r['max_threads']} | {r.get('dropped', 0)} | {r.get('vs_baseline', '-')} "
                         f"| {str(round(100 * r['of_limit'], 1)) + '%' if 'of_limit' in r else '-'} |")
        lines.append("")
        lines.append("per-frame cost (ms): " + ", ".join(f"{k} {v}" for k, v in lim["cost_ms"].items())
                     + f"; detector best batch {lim['best_batch']}; crops/frame {lim['crops_per_frame']}")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'pipeline[bench]'): no plot written")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if "load sweep" in results["cases"]:  # the latency-load curve: a picture of its own
        fig, ax = plt.subplots(figsize=(8, 5))
        sweep.plot(results["cases"]["load sweep"], ax)
        fig.tight_layout()
        fig.savefig(os.path.join(os.path.dirname(path), "load_sweep.png"), dpi=110)
    cases = {k: v for k, v in results["cases"].items() if k not in ("live view", "load sweep")}
    if not cases:
        return
    fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4.5), squeeze=False)
    for ax, (case, res) in zip(axes[0], cases.items()):
        if "p99_ratio" in res:
            for name, r in res["rows"].items():
                series = r.get("p99_over_time", [])
                ax.plot([t for t, _ in series], [v for _, v in series], marker="o", label=name)
            ax.set_xlabel("time (s)")
            ax.set_ylabel("P99 latency per 2 s window (ms)")
            ax.set_yscale("log")
            ax.set_title(f"{case}: {res['cameras']} paced cameras, {res['offered_fps']:.0f} fps")
            ax.legend(fontsize=8)
            continue
        names = list(res["rows"])
        fps = [res["rows"][n]["throughput_fps"] for n in names]
        p99 = [res["rows"][n]["latency"]["p99_ms"] or 0 for n in names]
        ax.barh(names, fps, color=["#999999" if n.startswith("sync") else "#2a7ab9" for n in names])
        ax.axvline(res["limit"]["limit_fps"], color="#c0392b", linestyle="--", label="limit")
        for i, (f, p) in enumerate(zip(fps, p99)):
            ax.text(f, i, f" {f:.0f} fps, p99 {p:.0f} ms", va="center", fontsize=8)
        ax.set_xlabel("frames per second (all cameras)")
        ax.set_title(f"{case}: {res['cameras']} cameras")
        ax.legend(fontsize=8, loc="lower right")
        ax.set_xlim(0, max(fps + [res["limit"]["limit_fps"]]) * 1.45)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(args: argparse.Namespace) -> int:
    if getattr(args, "density", None):
        return density_main(args)
    config = load_config(args.config)
    sweeps = []
    for spec in getattr(args, "sweep", None) or []:
        key, _, values = spec.partition("=")
        sweeps.append((key, values.split(",")))
    results: dict = {"machine": {"cores": len(os.sched_getaffinity(0)), "cpu": cpu_name(),
                                 "onnxruntime": ort.__version__, "python": platform.python_version()},
                     "command": f"pipeline bench --config {args.config} --camera-count {args.camera_count} --frames {args.frames}"
                                + (" --live" if args.live else "") + (" --load-sweep" if args.load_sweep else "")
                                + (" --no-cases" if args.no_cases else "") + (" --web" if args.web else "")
                                + f" --live-seconds {args.live_seconds:g}",
                     "cases": {}}
    cams = with_cameras(config, args.camera_count)
    if args.load_sweep:
        detector_only = without_classifier(config)
        limit = measure_costs(detector_only)
        rates = {s.uri: _rate(s.uri) for s in config.sources}
        results["cases"]["load sweep"] = sweep.sweep(
            detector_only, limit["limit_fps"], rates, args.live_seconds,
            lambda cfg, seconds: run_pipeline(cfg, 0, live=True, seconds=seconds))
        results["cases"]["load sweep"]["limit"] = limit
    if not args.no_cases:
        results["cases"]["detector"] = bench_case("detector", without_classifier(cams), args.frames, sweeps)
    if not args.no_cases and any(isinstance(s, ClassifySpec) for s in config.graph):
        results["cases"]["classifier"] = bench_case("classifier", cams, args.frames, [])
        log.info("case classifier once per track: pipeline")
        tracked = run_pipeline(per_track(cams), args.frames)
        classifier = results["cases"]["classifier"]
        base = classifier["rows"]["sync baseline"]["throughput_fps"]
        tracked["vs_baseline"] = round(tracked["throughput_fps"] / base, 2) if base else None  # the limit
        # assumes every crop classified on every frame: no fraction of it for this row
        classifier["rows"]["pipeline, track + classify once per track"] = tracked
    if args.web:
        paced = replace(config, sources=[replace(s, realtime=True, loop=True) for s in config.sources])
        results["cases"]["live view"] = web.bench_web(without_classifier(cams), without_classifier(paced),
                                                      args.frames, 10.0, run_pipeline)
    if args.live:
        results["cases"]["live overload"] = bench_live(without_classifier(config), args.live_seconds)
    os.makedirs(args.out, exist_ok=True)
    text = table(results)
    print(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"Command: `{results['command']}`  \nMachine: {results['machine']}\n\n{text}\n")
    plot(results, os.path.join(args.out, "results.png"))
    log.info("wrote %s/results.json, results.md and the plots", args.out)
    return 0


def density_main(args: argparse.Namespace) -> int:
    """`--density CLIP`: the density search alone (`bench.density`)."""
    named = args.density in camera_clips.NAMES
    if args.fps is not None and not named:
        raise SystemExit(f"bench: --fps sets the rate of a made clip; {args.density} plays at its own")

    config = load_config(args.config)
    if args.processes is not None and args.processes < 1:
        raise SystemExit(f"bench: --processes: must be >= 1, got {args.processes}")
    if args.watched < 0:
        raise SystemExit(f"bench: --watched: must be >= 0, got {args.watched}")
    if (args.processes or 1) > 1:
        from pipeline.cluster.checks import processes_problems

        problems = processes_problems(config)[1]
        if problems:
            raise SystemExit(f"bench: {'; '.join(problems)}")
    clip = camera_clips.clip_or_file(args.density, args.fps or 15)
    sub = camera_clips.clip_or_file(args.detect_clip, args.fps or 15) if args.detect_clip else None
    scenarios = density.SCENARIOS if args.scenario == "both" else (args.scenario.replace("-", " "),)
    result = density.bench_density(config, clip, _rate(clip), args.live_seconds, args.runs,
                                   detect_clip=sub, scenarios=scenarios, processes=args.processes or 1,
                                   watched=args.watched)
    result["machine"] = {"cores": len(os.sched_getaffinity(0)), "cpu": cpu_name(), "onnxruntime": ort.__version__}
    result["command"] = (f"pipeline bench --config {args.config} --density {args.density}"
                         + (f" --detect-clip {args.detect_clip}" if args.detect_clip else "")
                         + (f" --fps {args.fps}" if args.fps else "") + f" --live-seconds {args.live_seconds:g}"
                         + f" --scenario {args.scenario}"
                         + (f" --processes {args.processes}" if (args.processes or 1) > 1 else "")
                         + (f" --watched {args.watched}" if args.watched else "")
                         + f" --runs {args.runs}")
    os.makedirs(args.out, exist_ok=True)
    text = density.table(result)
    print(text)
    with open(os.path.join(args.out, "density.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "density.md"), "w") as f:
        f.write(f"Command: `{result['command']}`  \nMachine: {result['machine']}\n\n{text}\n")
    log.info("wrote %s/density.json and density.md", args.out)
    return 0
