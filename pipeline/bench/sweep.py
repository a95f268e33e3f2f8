"""The latency-load curve: paced live cameras at a range of offered loads, the tuned
synchronous loop and the pipeline on the same cameras, one after the other.

Load levels are fractions of the machine's limit (cores / the per-frame cost of every
stage), realised as a number of cameras playing the config's clips at their own frame
rate, looped, each starting a different fraction of a frame late (independent cameras
are not in step; both designs get the same phases). Latency runs from a frame's due time
(when a camera would deliver it).
A design *loses* frames when it drops them (the pipeline's live lanes) or leaves them
unprocessed at the end (the loop falls behind: its backlog grows without bound). Its
capacity is the highest offered load it handles with under 1% lost.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from pipeline.bench.baseline import run_baseline
from pipeline.config import Config, QueueConfig, SourceConfig

log = logging.getLogger("pipeline.bench")

LEVELS = (0.25, 0.5, 0.75, 0.85, 0.9, 0.95, 1.0, 1.1, 1.25, 1.5)
# "Idle cores help the frame at hand": measured at the lighter loads, where it could
IDLE_POLICY_LEVELS = (0.25, 0.5, 0.75)
IDLE_POLICY = "pipeline, 2 intra-op threads when idle"
LOST_AT_CAPACITY = 0.01


def cameras_for(config: Config, target_fps: float, rates: dict[str, float]) -> tuple[list[SourceConfig], float]:
    """Live cameras playing the config's clips whose frame rates add up close to
    `target_fps`: the faster clips first, then the slower ones to fill up."""
    clips = sorted({s.uri: s for s in config.sources}.values(), key=lambda s: -rates[s.uri])
    chosen: list[SourceConfig] = []
    offered = 0.0
    for clip in clips:
        rate = rates[clip.uri]
        last = clip is clips[-1]
        while offered + (rate / 2 if last else rate) <= target_fps or not chosen:
            chosen.append(clip)
            offered += rate
    # independent cameras are not in step: each starts a different fraction of a frame late
    cams = [replace(s, id=f"cam{i}", live=True, realtime=True, loop=True, queue=QueueConfig(size=1, policy="drop_oldest"),
                    phase_s=(i * 0.618033988749895) % 1.0 / rates[s.uri])
            for i, s in enumerate(chosen)]
    return cams, offered


def lost_fraction(offered_frames: float, processed: int) -> float:
    return max(0.0, 1.0 - processed / offered_frames) if offered_frames else 0.0


def with_idle_threads(config: Config, threads: int) -> Config:
    det = config.detector
    det = replace(det, engine=replace(det.engine, idle_intra_op_threads=threads))
    return replace(config, models={**config.models, det.name: det})


def sweep(config: Config, limit_fps: float, rates: dict[str, float], seconds: float, run_pipeline,
          levels: tuple[float, ...] = LEVELS) -> dict:
    """One row per design and load level; `run_pipeline(config, seconds)` runs the pipeline live."""
    rows = []
    seen: set[float] = set()
    for level in levels:
        sources, offered = cameras_for(config, level * limit_fps, rates)
        if offered in seen:
            continue  # the clips' frame rates give this load already
        seen.add(offered)
        cfg = replace(config, sources=sources)
        log.info("load sweep: %.0f%% of the limit: %d cameras, %.0f fps offered", 100 * level, len(sources), offered)
        designs = ["sync loop, tuned", "pipeline"] + ([IDLE_POLICY] if level in IDLE_POLICY_LEVELS else [])
        for design in designs:
            if design == "pipeline":
                r = run_pipeline(cfg, seconds)
            elif design == IDLE_POLICY:
                r = run_pipeline(with_idle_threads(cfg, 2), seconds)
            else:
                r = run_baseline(cfg, 0, tuned=True, live=True, seconds=seconds)
            lost = lost_fraction(offered * seconds, r["processed"])
            rows.append({"design": design, "level": level, "cameras": len(sources), "offered_fps": round(offered, 1),
                         "done_fps": round(r["processed"] / seconds, 1), "lost": round(lost, 4),
                         "dropped": r.get("dropped", 0), "p50_ms": r["latency"]["p50_ms"],
                         "p99_ms": r["latency"]["p99_ms"], "cpu_percent": r["cpu_percent"]})
            log.info("  %-18s done %.1f fps, lost %.1f%%, p50 %s ms, p99 %s ms", design, rows[-1]["done_fps"],
                     100 * lost, rows[-1]["p50_ms"], rows[-1]["p99_ms"])
    return {"limit_fps": limit_fps, "seconds": seconds, "rows": rows, "capacity": capacities(rows)}


def capacities(rows: list[dict]) -> dict[str, float | None]:
    """Per design run at every level, the highest offered load (fps) with under 1% of frames lost."""
    out: dict[str, float | None] = {}
    levels = {r["level"] for r in rows}
    for design in dict.fromkeys(r["design"] for r in rows):
        if {r["level"] for r in rows if r["design"] == design} != levels:
            continue
        ok = [r["offered_fps"] for r in rows if r["design"] == design and r["lost"] < LOST_AT_CAPACITY]
        out[design] = max(ok) if ok else None
    return out


def table(result: dict) -> str:
    cap = result["capacity"]
    lines = [f"offered load as a share of the limit ({result['limit_fps']} fps), {result['seconds']:g} s per run; "
             f"capacity (highest load with < 1% of frames lost): "
             + ", ".join(f"{d} {v} fps" for d, v in cap.items()), "",
             "| load | cameras | offered fps | design | done fps | lost | p50 ms | p99 ms | CPU % |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {100 * r['level']:.0f}% | {r['cameras']} | {r['offered_fps']} | {r['design']} | "
                     f"{r['done_fps']} | {100 * r['lost']:.1f}% | {r['p50_ms']} | {r['p99_ms']} | {r['cpu_percent']} |")
    return "\n".join(lines)


def plot(result: dict, ax) -> None:
    for n, design in enumerate(dict.fromkeys(r["design"] for r in result["rows"])):
        mine = [r for r in result["rows"] if r["design"] == design]
        color = f"C{n}"
        ax.plot([r["offered_fps"] for r in mine], [r["p99_ms"] for r in mine], marker="o", color=color,
                label=f"{design} P99")
        ax.plot([r["offered_fps"] for r in mine], [r["p50_ms"] for r in mine], marker=".", linestyle=":",
                color=color, label=f"{design} P50")
    ax.axvline(result["limit_fps"], color="#c0392b", linestyle="--", label="limit")
    ax.set_yscale("log")
    ax.set_xlabel("offered load (fps, paced live cameras)")
    ax.set_ylabel("latency from the frame's due time (ms)")
    ax.set_title("latency against offered load")
    ax.legend(fontsize=8)
