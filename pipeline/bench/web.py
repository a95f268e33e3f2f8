"""The live view's cost and latency (`pipeline bench --web`):

- its cost when nobody watches: the same file cameras with the server off and on,
  alternated, repeated (median of each);
- its latency when someone watches: paced cameras, one MJPEG client per camera reading
  the stream; a picture's latency is from the frame's capture (its due time) to the
  moment its last byte reached the client. A browser adds its decode and paint (about
  one refresh of the screen) to that.
"""
from __future__ import annotations

import logging
import statistics
import threading
import time
import urllib.request
from dataclasses import asdict, replace

from pipeline.config import Config
from pipeline.config.outputs import WebConfig
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.snapshot import Latency

log = logging.getLogger("pipeline.bench")


def with_web(config: Config, on: bool) -> Config:
    return replace(config, outputs=replace(config.outputs, web=WebConfig(port=0) if on else None))


def read_mjpeg(url: str, seconds: float, latency: Histogram) -> int:
    """Read an MJPEG stream for `seconds`; record each picture's capture-to-here latency."""
    pictures = 0
    deadline = time.monotonic() + seconds
    with urllib.request.urlopen(url, timeout=10) as stream:
        while time.monotonic() < deadline:
            headers = {}
            line = stream.readline()
            while line and line.strip() != b"--frame":
                line = stream.readline()
            for line in iter(stream.readline, b"\r\n"):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            stream.read(int(headers["content-length"]))
            latency.record(max(0.0, time.time() - float(headers["x-capture-time"])))
            pictures += 1
    return pictures


def bench_web(files: Config, paced: Config, frames: int, seconds: float, run_pipeline, repeats: int = 3) -> dict:
    runs: dict[str, list[float]] = {"server off": [], "server on, nobody watching": []}
    for _ in range(repeats):
        for name, on in (("server off", False), ("server on, nobody watching", True)):
            runs[name].append(run_pipeline(with_web(files, on), frames)["throughput_fps"])
            log.info("web: %s: %.1f fps", name, runs[name][-1])
    medians = {k: statistics.median(v) for k, v in runs.items()}
    latency = watched_latency(paced, seconds)
    return {"runs": runs, "median_fps": medians,
            "ratio": round(medians["server on, nobody watching"] / medians["server off"], 3), "watched": latency}


def watched_latency(config: Config, seconds: float) -> dict:
    from pipeline.graph import Pipeline

    p = Pipeline(with_web(config, True))
    p.start()
    assert p.side.web is not None
    time.sleep(1.0)
    out: dict[str, dict] = {}
    threads = []
    for s in config.sources:
        h = Histogram()
        out[s.id] = {"histogram": h}
        t = threading.Thread(target=lambda cam=s.id, hist=h: out[cam].update(
            pictures=read_mjpeg(f"http://127.0.0.1:{p.side.web.port}/stream/{cam}", seconds, hist)))
        threads.append(t)
        t.start()
    for t in threads:
        t.join()
    p.stop(abort=True)
    p.close(timeout=10)
    return {cam: {"pictures": v.get("pictures", 0), **asdict(Latency.of(v["histogram"]))} for cam, v in out.items()}


def table(result: dict) -> str:
    lines = ["| server | fps (median of 3) | runs |", "|---|---:|---|"]
    for name, runs in result["runs"].items():
        lines.append(f"| {name} | {result['median_fps'][name]:.1f} | {', '.join(f'{r:.1f}' for r in runs)} |")
    lines += ["", f"server on, nobody watching / server off: {result['ratio']}", "",
              "| watched camera | pictures | p50 ms | p99 ms |", "|---|---:|---:|---:|"]
    for cam, v in result["watched"].items():
        lines.append(f"| {cam} | {v['pictures']} | {v['p50_ms']} | {v['p99_ms']} |")
    return "\n".join(lines)
