"""Human-readable views of a metrics snapshot: the progress line and the final summary."""
from __future__ import annotations


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def progress_line(snap: dict) -> str:
    parts = []
    for cam, c in snap["cameras"].items():
        state = "" if c["state"] == "streaming" else f" {c['state']}"
        drops = sum(c["dropped"].values())
        parts.append(f"{cam}: {c['processed']}f {c['fps']:.1f}fps{state}" + (f" {drops}drop" if drops else ""))
    return (f"[{snap['elapsed_s']:6.1f}s] {snap['throughput_fps']:.1f} fps total, p99 {_ms(snap['latency']['p99_ms'])} ms"
            f", cpu {snap['cpu_percent']:.0f}% | " + " | ".join(parts))


def summary_table(snap: dict) -> str:
    header = f"{'camera':<14}{'state':<13}{'in':>7}{'done':>7}{'dropped':>9}{'errors':>7}{'fps':>8}{'p50 ms':>8}" \
             f"{'p99 ms':>8}  notes"
    lines = [header, "-" * len(header)]
    for cam, c in snap["cameras"].items():
        dropped = sum(c["dropped"].values())
        notes = []
        if c["dropped"]:
            notes.append("drops: " + ", ".join(f"{k} {v}" for k, v in sorted(c["dropped"].items())))
        if c["reconnects"]:
            notes.append(f"{c['reconnects']} reconnect(s), down {c['downtime_s']:.1f}s")
        if c["detail"]:
            notes.append(c["detail"])
        notes += [f"{output} output failed: {why}" for output, why in c["output_errors"].items()]
        for name, events in c["counts"].items():
            for event, per_class in events.items():
                notes += [f"{name}.{event}.{cls}={n}" for cls, n in per_class.items()]
        lines.append(f"{cam:<14}{c['state']:<13}{c['frames_in']:>7}{c['processed']:>7}{dropped:>9}{c['errors']:>7}"
                     f"{c['fps']:>8.1f}{_ms(c['latency']['p50_ms']):>8}{_ms(c['latency']['p99_ms']):>8}  "
                     + "; ".join(notes))
    lat = snap["latency"]
    lines.append(f"total: {snap['processed']} frames in {snap['elapsed_s']:.1f}s = {snap['throughput_fps']:.1f} fps; "
                 f"latency p50 {_ms(lat['p50_ms'])} ms, p99 {_ms(lat['p99_ms'])} ms; peak threads "
                 f"{snap['max_threads']} (plan {snap.get('thread_plan', '-')})")
    if snap.get("reached_after"):
        lines.append("latency reached at each stage boundary, p50/p99 ms: " + ", ".join(
            f"{k} {_ms(v['p50_ms'])}/{_ms(v['p99_ms'])}" for k, v in snap["reached_after"].items()))
    for name, e in snap["engines"].items():
        lines.append(f"engine {name}: {e['provider']}, {e['batches']} batches, mean batch {e['mean_batch']}, "
                     f"inference p50 {_ms(e['infer']['p50_ms'])} ms")
    for name, st in snap["stages"].items():
        if st.get("calls_saved"):
            lines.append(f"stage {name}: {st['calls_saved']} classifications saved by tracking")
    return "\n".join(lines)


def cluster_summary(snap: dict) -> str:
    """The cluster's merged snapshot: every camera with its host, then the hosts."""
    if not snap:
        return "no snapshot yet"
    header = f"{'camera':<14}{'host':<9}{'state':<11}{'done':>7}{'dropped':>9}{'errors':>7}{'fps':>8}{'p99 ms':>8}  notes"
    lines = [header, "-" * len(header)]
    for cam, c in sorted(snap["cameras"].items()):
        notes = [f"moved {c['moves']}x" if c.get("moves") else "", c.get("detail", "")]
        lines.append(f"{cam:<14}{c.get('host') or '-':<9}{c['state']:<11}{c['processed']:>7}"
                     f"{sum(c['dropped'].values()):>9}{c['errors']:>7}{c['fps']:>8.1f}{_ms(c['latency']['p99_ms']):>8}  "
                     + "; ".join(n for n in notes if n))
    lat = snap["latency"]
    lines.append(f"total: {snap['processed']} frames; latency p50 {_ms(lat['p50_ms'])} ms, p99 {_ms(lat['p99_ms'])} ms")
    for name, h in snap["hosts"].items():
        lines.append(f"host {name} on {h['node'] or '?'}: {'alive' if h['alive'] else 'LOST'}, "
                     f"{len(h['cameras'])} camera(s), cpu {h['cpu_percent'] if h['cpu_percent'] is not None else '-'}%")
    lines += snap.get("events", [])
    if "driver" in snap:
        lines.append(f"driver: {snap['driver']['polls']} polls, {snap['driver']['work_s']} s of its own work")
    return "\n".join(lines)
