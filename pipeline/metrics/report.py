"""Human-readable views of a metrics snapshot: the progress line (what happens now: the
recent figures, labelled with their window) and the final summary (the whole run's)."""
from __future__ import annotations

from pipeline.metrics.snapshot import CameraSnapshot, RecordingStats, Snapshot


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def progress_line(snap: Snapshot) -> str:
    parts = []
    for cam, c in snap.cameras.items():
        state = "" if c.state == "streaming" else f" {c.state}"
        drops = c.dropped_total
        parts.append(f"{cam}: {c.processed}f {c.recent.fps:.1f}fps{state}" + (f" {drops}drop" if drops else ""))
    recent = snap.recent
    return (f"[{snap.elapsed_s:6.1f}s] last {recent.window_s:.0f}s: {recent.fps:.1f} fps total, "
            f"p99 {_ms(recent.latency.p99_ms)} ms, cpu {snap.cpu_percent:.0f}% | " + " | ".join(parts))


def recording_note(r: RecordingStats) -> str:
    """A camera's recording in a few words: its size and rate, its segments, what it lacks."""
    note = (f"recording {r.state}: {r.bytes / 1e6:.1f} MB in {r.segments} segment(s), "
            f"{r.bytes_per_s * 8 / 1e6:.2f} Mbit/s")
    lacks = [f"{n} {what}" for n, what in ((r.gaps, "gap(s)"), (r.dropped, "packet(s) dropped"), (r.stalls, "stall(s)"))
             if n]
    if r.audio.startswith("left out"):
        lacks.append("no audio")
    return note + (f" ({', '.join(lacks)})" if lacks else "")


def _notes(c: CameraSnapshot) -> list[str]:
    notes = [f"moved {c.moves}x"] if c.moves else []
    if c.dropped:
        notes.append("drops: " + ", ".join(f"{k} {v}" for k, v in sorted(c.dropped.items())))
    if c.skipped:
        notes.append("skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(c.skipped.items())))
    if c.reconnects:
        notes.append(f"{c.reconnects} reconnect(s), down {c.downtime_s:.1f}s")
    if c.detail:
        notes.append(c.detail)
    if c.recording is not None:
        notes.append(recording_note(c.recording))
    notes += [f"{output} output failed: {why}" for output, why in c.output_errors.items()]
    if c.snapshots_lost:
        notes.append(f"{c.snapshots_lost} snapshot picture(s) LOST")
    lost = [f"{n} {what}" for n, what in ((c.video_frames_lost, "video frame(s)"),
                                           (c.jsonl_lines_lost, "JSON line(s)"),
                                           (c.store_lost, "store record(s)")) if n]
    if lost:
        notes.append("LOST " + ", ".join(lost))
    if c.detector.predicted:
        notes.append(f"detector on {c.detector.runs} frame(s), {c.detector.predicted} predicted "
                     f"({c.detector.gated} gated: no motion)")
    for name, events in c.counts.items():
        for event, per_class in events.items():
            notes += [f"{name}.{event}.{cls}={n}" for cls, n in per_class.items()]
    return notes


def _camera_rows(snap: Snapshot) -> list[str]:
    """One row per camera; with a host column when the cameras ran on a cluster."""
    hosts = bool(snap.hosts)
    header = f"{'camera':<14}{format('host', '<9') if hosts else ''}{'state':<13}{'in':>7}{'done':>7}" \
             f"{'dropped':>9}{'errors':>7}{'run fps':>8}{'p50 ms':>8}{'p99 ms':>8}  notes"
    lines = [header, "-" * len(header)]
    for cam, c in snap.cameras.items():
        host = f"{c.host or '-':<9}" if hosts else ""
        lines.append(f"{cam:<14}{host}{c.state:<13}{c.frames_in:>7}{c.processed:>7}"
                     f"{c.dropped_total:>9}{c.errors:>7}{c.fps:>8.1f}{_ms(c.latency.p50_ms):>8}"
                     f"{_ms(c.latency.p99_ms):>8}  " + "; ".join(_notes(c)))
    return lines


def _event_rows(snap: Snapshot) -> list[str]:
    return [f"events {dest}: {e.sent} sent" + (f", {e.waiting} waiting" if e.waiting else "")
            + (f", {e.dropped} LOST" if e.dropped else "") for dest, e in snap.events.items()]


def _retention_rows(snap: Snapshot) -> list[str]:
    return [f"retention {folder}: removed {r.removed_files} file(s), {r.removed_bytes / 1e6:.1f} MB; "
            f"{r.kept_bytes / 1e6:.1f} MB kept" for folder, r in snap.retention.items()]


def _host_rows(snap: Snapshot) -> list[str]:
    lines = [f"host {name} on {h.node or '?'}: {'alive' if h.alive else 'LOST'}, "
             f"{len(h.cameras)} camera(s), cpu {h.cpu_percent if h.cpu_percent is not None else '-'}%"
             for name, h in snap.hosts.items()]
    lines += snap.incidents
    if snap.driver is not None:
        lines.append(f"driver: {snap.driver.polls} polls, {snap.driver.work_s} s of its own work")
    return lines


def summary_table(snap: Snapshot) -> str:
    """The final summary (and `pipeline cluster status`): cameras, totals, engines, event
    destinations and, on a cluster, its hosts; its fps and latencies are the whole run's."""
    lines = _camera_rows(snap)
    lat = snap.latency
    lines.append(f"total: {snap.processed} frames in {snap.elapsed_s:.1f}s = {snap.throughput_fps:.1f} fps; "
                 f"latency over the run p50 {_ms(lat.p50_ms)} ms, p99 {_ms(lat.p99_ms)} ms; peak threads "
                 f"{snap.max_threads if snap.max_threads is not None else '-'} "
                 f"(plan {snap.thread_plan if snap.thread_plan is not None else '-'})")
    if snap.reached_after:
        lines.append("latency reached at each stage boundary, p50/p99 ms: " + ", ".join(
            f"{k} {_ms(v.p50_ms)}/{_ms(v.p99_ms)}" for k, v in snap.reached_after.items()))
    for name, e in snap.engines.items():
        lines.append(f"engine {name}: {e.provider}, {e.batches} batches, mean batch {e.mean_batch}, "
                     f"inference p50 {_ms(e.infer.p50_ms)} ms")
    for name, st in snap.stages.items():
        if st.counters.get("calls_saved"):
            lines.append(f"stage {name}: {st.counters['calls_saved']} classifications saved by tracking")
    return "\n".join(lines + _event_rows(snap) + _retention_rows(snap) + _host_rows(snap))
