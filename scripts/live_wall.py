"""The live page as an operator's wall, in headless Chromium on this machine: `--cameras`
tiles in view at once, each playing its camera's own video (the `/api/live` socket) with
the boxes drawn by the page, while the pipeline runs beside it on the same cores.

The cameras play the `360p` clip of `pipeline.bench.camera_clips` (640x360, 15 fps, GOP 2 s,
looped, `realtime`); `--rtsp N` of them read instead a real RTSP server's H.264 (Debian's
GStreamer one, `tests/support/rtsp_server.py`, one shared session), `--hevc N` (the last ones)
one sending HEVC (the tile falls back to stills and says why). The first camera records
the `1080p` clip as its main stream and analyses `360p` as its sub-stream (`detect_uri`), so
`--full-screenshot` shows it opened full size: its main stream, the boxes scaled. The detector is
yolox_nano at `--detect-fps` a camera (0: a model that costs nothing, every frame: the
figures are then the page's and the plumbing's alone). `--processes N` runs the pipeline's
cameras over N processes (`run --processes N`: the page served by the run, each camera's
video relayed from its host process; the pipeline's CPU is all of them; the JSON lines
on, as such a run needs them).

Reported after `--warmup` seconds, over `--seconds`, per tile and as the median and the
worst tile: the share of the camera's frames the video presented (its distinct pictures
presented, `requestVideoFrameCallback`'s media times, against the clip's rate times the time;
beside it `getVideoPlaybackQuality`'s total less dropped, which counts a picture shown again
after a seek back once more), the delay behind the live edge
(buffered end less the picture shown), the seeks to the live edge, the share of presented
pictures with their own boxes, with the last analysed frame's (held) and without, and the
latency from a frame's capture to its picture's presentation (median, P95 of all pictures);
the CPU of the pipeline and of Chromium (% of one core) and the frames the pipeline dropped;
the tiles out of the window's view, which the page does not play (`--height` holds them).

    python scripts/live_wall.py [--cameras 16] [--rtsp 4] [--hevc 0] [--seconds 60] [--warmup 15]
                                [--detect-fps 0] [--rounds 1] [--screenshot wall.png]
                                [--full-screenshot full.png] [--width 2200] [--processes 1]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from chromium import chromium  # noqa: E402
from live_video_cpu import cpu_seconds, dropped, free_port, wait_up  # noqa: E402
from onnx_models import make_slow_model  # noqa: E402
from pipeline.bench.camera_clips import clip  # noqa: E402
from pipeline.catalog.entries import MODELS_DIR  # noqa: E402

FPS = 15

# per tile: the video's quality counters, where it is against what is buffered, the overlay's counts
TILES = """
return [...document.querySelectorAll(".tile")].map((t) => {
  const v = t.querySelector("video.live"), live = t.live, media = live && live.media;
  if (!v || v.hidden || !media || !media.sb) return [t.dataset.camera, null];
  const q = v.getVideoPlaybackQuality(), b = media.sb.buffered, o = live.overlay;
  return [t.dataset.camera, {total: q.totalVideoFrames, dropped: q.droppedVideoFrames, seeks: media.seeks,
    behind: b.length ? b.end(b.length - 1) - v.currentTime : null, presented: o.presented,
    own: o.withBoxes, held: o.held, without: o.withoutBoxes, latency: o.latency.slice(),
    shown: o.log.map((e) => e[0])}];
});
"""


# tiles wholly below or above the window: the page plays a tile only while it is in view
OUT_OF_VIEW = """
return [...document.querySelectorAll(".tile")].filter((t) => {
  const r = t.getBoundingClientRect();
  return r.top >= window.innerHeight || r.bottom <= 0;
}).length;
"""


def cpu_of(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def descendants(pid: int) -> list[int]:
    """`pid` and every process under it (Chromium's renderers, GPU and utility processes)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def rtsp_server(codec: str = "h264") -> tuple[subprocess.Popen, str]:
    """Debian's GStreamer RTSP server (the system python3: it needs `gi`) making 640x360 15 fps
    live in `codec`, as a camera's sub-stream does; its URL."""
    proc = subprocess.Popen(["/usr/bin/python3", str(ROOT / "tests" / "support" / "rtsp_server.py"), "--port", "0",
                             "--size", "640x360", "--fps", str(FPS), "--pattern", "ball", "--codec", codec],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("rtsp://"):
        proc.kill()
        sys.exit("live_wall: the RTSP server did not start (apt-get install gir1.2-gst-rtsp-server-1.0 "
                 "gstreamer1.0-rtsp gstreamer1.0-plugins-ugly gstreamer1.0-plugins-bad python3-gst-1.0)")
    return proc, url


def config(folder: str, args: argparse.Namespace, port: int, urls: dict[str, str]) -> str:
    sources = []
    for i in range(args.cameras):
        if i == 0:  # a main stream recorded, its sub-stream analysed: full size plays the main one
            source = {"uri": clip("1080p"), "detect_uri": clip("360p"), "realtime": True, "loop": True,
                      "record": {"enabled": True}}
        elif i >= args.cameras - args.hevc:
            source = {"uri": urls["h265"]}
        elif i <= args.rtsp:
            source = {"uri": urls["h264"]}
        else:
            source = {"uri": clip("360p"), "realtime": True, "loop": True}
        sources.append({"id": f"cam{i:02d}", **source})
    if args.detect_fps:
        det = {"path": str(MODELS_DIR / "yolox_nano.onnx"), "layout": "yolox", "input_size": 416,
               "labels": str(MODELS_DIR / "coco_classes.txt"), "score_threshold": 0.3}
        detect = {"detect": {"model": "det", "fps": args.detect_fps}}
    else:
        det = {"path": os.path.join(folder, "null.onnx"), "layout": "e2e", "input_size": 64}
        detect = {"detect": {"model": "det"}}
    cfg = {"sources": sources, "models": {"det": det}, "graph": [detect, "track", "annotate"],
           "outputs": {"dir": os.path.join(folder, "out"), "video": {"enabled": False},
                       "jsonl": {"enabled": args.processes > 1},  # a run over processes resumes a camera from them
                       "record": {"enabled": False}, "store": False, "web": {"port": port}}}
    path = os.path.join(folder, "wall.yaml")
    Path(path).write_text(yaml.safe_dump(cfg))
    return path


def full_size(d, camera: str) -> None:
    """The camera's tile opened full size (its main stream), scrolled into view, once it plays
    and its boxes had a few seconds to come."""
    tile = d.find_element("css selector", f'.tile[data-camera="{camera}"]')
    tile.find_element("css selector", ".full-size").click()
    d.execute_script("arguments[0].scrollIntoView()", tile)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not d.execute_script(
            "const v = arguments[0].querySelector('video.live'); return v && !v.hidden && v.videoWidth > 1000 "
            "&& v.getVideoPlaybackQuality().totalVideoFrames > 30", tile):
        time.sleep(0.5)
    time.sleep(3)


def tiles(d) -> dict:
    return {cam: t for cam, t in d.execute_script(TILES)}


def measure(args: argparse.Namespace, folder: str) -> dict:
    port = free_port()
    servers, urls = [], {}
    for codec, wanted in (("h264", args.rtsp), ("h265", args.hevc)):
        if wanted:
            server, urls[codec] = rtsp_server(codec)
            servers.append(server)
    spread = ["--processes", str(args.processes)] if args.processes > 1 else []
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", config(folder, args, port, urls), "-q",
                             *spread], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d, service = chromium(args.width, args.height)
    try:
        wait_up(port, proc)
        d.get(f"http://127.0.0.1:{port}/")
        time.sleep(args.warmup)
        browser_pids, run_pids = descendants(service.process.pid), descendants(proc.pid)  # the run's host processes too
        first, cpu0, lost0, wall0 = tiles(d), (cpu_of(run_pids), cpu_of(browser_pids)), dropped(port), \
            time.monotonic()
        time.sleep(args.seconds)
        last, cpu1, lost1, wall = tiles(d), (cpu_of(run_pids), cpu_of(browser_pids)), dropped(port), \
            time.monotonic() - wall0
        out_of_view = d.execute_script(OUT_OF_VIEW)
        if args.screenshot:
            d.save_screenshot(args.screenshot)
        if args.full_screenshot:
            full_size(d, "cam00")
            d.save_screenshot(args.full_screenshot)
    finally:
        d.quit()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        for server in servers:
            server.kill()
    per_tile = {}
    for cam, a in sorted(first.items()):
        b = last.get(cam)
        if not a or not b:
            per_tile[cam] = None
            continue
        pictures = max(1, b["presented"] - a["presented"])
        distinct = {round(t, 3) for t in b["shown"][-pictures:]}  # a picture shown again after a seek back counts once
        shown = (b["total"] - b["dropped"]) - (a["total"] - a["dropped"])
        per_tile[cam] = {"presented": len(distinct) / (FPS * wall), "composited": shown / (FPS * wall),
                         "dropped": b["dropped"] - a["dropped"],
                         "seeks": b["seeks"] - a["seeks"], "behind": b["behind"],
                         "own": (b["own"] - a["own"]) / pictures, "held": (b["held"] - a["held"]) / pictures,
                         "without": (b["without"] - a["without"]) / pictures, "latency": b["latency"]}
    return {"tiles": per_tile, "pipeline_cpu": 100 * (cpu1[0] - cpu0[0]) / wall,
            "chromium_cpu": 100 * (cpu1[1] - cpu0[1]) / wall, "pipeline_dropped": lost1 - lost0,
            "out_of_view": out_of_view}


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def report(r: dict) -> dict:
    playing = [t for t in r["tiles"].values() if t]
    latency = [x for t in playing for x in t["latency"]]
    row = {"tiles": len(r["tiles"]), "playing": len(playing), "out_of_view": r["out_of_view"],
           "presented_median": statistics.median(t["presented"] for t in playing) if playing else 0.0,
           "presented_worst": min((t["presented"] for t in playing), default=0.0),
           "composited_median": statistics.median(t["composited"] for t in playing) if playing else 0.0,
           "behind_median": statistics.median(t["behind"] for t in playing if t["behind"] is not None)
           if playing else None,
           "seeks": sum(t["seeks"] for t in playing),
           "own": statistics.median(t["own"] for t in playing) if playing else 0.0,
           "held": statistics.median(t["held"] for t in playing) if playing else 0.0,
           "without": statistics.median(t["without"] for t in playing) if playing else 0.0,
           "latency_median": quantile(latency, 0.5) if latency else None,
           "latency_p95": quantile(latency, 0.95) if latency else None,
           "pipeline_cpu": r["pipeline_cpu"], "chromium_cpu": r["chromium_cpu"],
           "pipeline_dropped": r["pipeline_dropped"]}
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cameras", type=int, default=16)
    ap.add_argument("--rtsp", type=int, default=4, help="of the cameras, those after the first read from a real RTSP "
                                                        "server")
    ap.add_argument("--hevc", type=int, default=0, help="of the cameras, the last ones read from an HEVC RTSP server")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured")
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds of the page open before it is measured")
    ap.add_argument("--detect-fps", type=float, default=0.0,
                    help="yolox_nano's rate a camera (0: a model that costs nothing, every frame)")
    ap.add_argument("--processes", type=int, default=1, help="the pipeline's cameras over N processes (`run "
                    "--processes N`: the page served by the run, each camera relayed from its host)")
    ap.add_argument("--rounds", type=int, default=1, help="fresh runs; the figures are their medians")
    ap.add_argument("--width", type=int, default=2200)
    ap.add_argument("--height", type=int, default=1800)
    ap.add_argument("--screenshot", help="a PNG of the page at the end of the last round")
    ap.add_argument("--full-screenshot", help="then a PNG of the first camera opened full size (its main stream)")
    ap.add_argument("--json", action="store_true", help="per tile, as JSON")
    args = ap.parse_args()
    if 1 + args.rtsp + args.hevc > args.cameras:
        ap.error(f"--rtsp {args.rtsp} and --hevc {args.hevc} leave no room for the first camera of --cameras "
                 f"{args.cameras}")
    rows, raw = [], []
    with tempfile.TemporaryDirectory(prefix="live-wall-") as folder:
        make_slow_model(os.path.join(folder, "null.onnx"), matmuls=0)
        for _ in range(args.rounds):
            raw.append(measure(args, folder))
            rows.append(report(raw[-1]))
    if args.json:
        print(json.dumps(raw, indent=1))
    med = {k: statistics.median(r[k] for r in rows) if all(r[k] is not None for r in rows) else None for k in rows[0]}
    ms = lambda v: "-" if v is None else f"{1000 * v:.0f} ms"  # noqa: E731
    print(f"{args.cameras} tiles ({args.rtsp} RTSP, {args.hevc} HEVC) 640x360 {FPS} fps, {args.seconds:g} s, "
          f"detector {'yolox_nano at %g fps' % args.detect_fps if args.detect_fps else 'none'} "
          f"(median of {args.rounds}):")
    unseen = f" ({med['out_of_view']:g} out of view: a larger --height)" if med["out_of_view"] else ""
    print(f"  playing {med['playing']:g} of {med['tiles']:g}{unseen}; presented median {100 * med['presented_median']:.1f}%, "
          f"worst tile {100 * med['presented_worst']:.1f}% (composited, repeats included, "
          f"{100 * med['composited_median']:.1f}%); behind live {med['behind_median'] or 0:.2f} s, "
          f"seeks {med['seeks']:g}")
    print(f"  pictures with their own boxes {100 * med['own']:.1f}%, held {100 * med['held']:.1f}%, "
          f"without {100 * med['without']:.1f}%; capture to screen median {ms(med['latency_median'])}, "
          f"P95 {ms(med['latency_p95'])}")
    print(f"  cpu pipeline {med['pipeline_cpu']:.0f}%, chromium {med['chromium_cpu']:.0f}%; "
          f"pipeline dropped {med['pipeline_dropped']:g}")


if __name__ == "__main__":
    main()
