"""What watching the live page costs the pipeline's process: its camera's own video (the
sockets of `/api/live/<camera>`) against the JPEG stills the server encodes, and against
nobody watching. `--cameras` paced live cameras play a 640x360 15 fps clip (`360p` of
`pipeline.bench.camera_clips`, looped, `realtime`), detected by a model that costs
nothing, so the figures are the pipeline's own plumbing and the web server's. Three turns,
each a fresh `pipeline run`, watched from this process (another one than the pipeline's):

1. `none`: nobody watches;
2. `video`: a WebSocket per camera reading everything it is sent (fragments and records);
3. `stills`: a reader per camera asking `/frame/<camera>.jpg?after=<seq>` at the page's
   rate (`outputs.web.fps`), as a tile on stills does.

Reported per turn, after `--warmup` seconds: the pipeline process's CPU (user + system, %
of one core) over `--seconds`, the frames it dropped, and what the viewers received; the
turns are taken in rounds (`--rounds`), each figure the median of its rounds.

    python scripts/live_video_cpu.py [--cameras 16] [--seconds 30] [--warmup 8] [--rounds 3]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from onnx_models import make_slow_model  # noqa: E402
from pipeline.bench.camera_clips import clip  # noqa: E402
from pipeline.bench.density import cpu_s  # noqa: E402

STILL_FPS = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (one gone: 0)."""
    return cpu_s(f"/proc/{pid}/stat") or 0.0


def dropped(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/cameras", timeout=10) as r:
        cameras = json.loads(r.read())["cameras"]
    return sum(sum(c.get("dropped", {}).values()) for c in cameras.values())


def wait_up(port: int, proc: subprocess.Popen) -> None:
    """Until the pipeline's page answers (its run ended first: exit naming its code)."""
    while True:
        try:
            dropped(port)
            return
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"the pipeline ended with exit code {proc.returncode} before its page answered")
            time.sleep(0.3)


async def watch_video(port: int, camera: str, until: float, got: dict) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"http://127.0.0.1:{port}/api/live/{camera}", max_msg_size=0) as ws:
            while (left := until - time.monotonic()) > 0:
                try:
                    m = await asyncio.wait_for(ws.receive(), left)
                except asyncio.TimeoutError:
                    return
                if m.type == aiohttp.WSMsgType.BINARY:
                    got["fragments"] += 1
                elif m.type == aiohttp.WSMsgType.TEXT:
                    got["records"] += json.loads(m.data).get("type") == "frame"
                else:
                    return


async def watch_stills(port: int, camera: str, until: float, got: dict) -> None:
    seq = -1
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < until:
            async with session.get(f"http://127.0.0.1:{port}/frame/{camera}.jpg?after={seq}") as r:
                if r.status == 200:
                    await r.read()
                    seq = int(r.headers.get("X-Seq", seq))
                    got["stills"] += 1
            await asyncio.sleep(1 / STILL_FPS)


async def watch(mode: str, port: int, cameras: list[str], seconds: float) -> dict:
    got = {"fragments": 0, "records": 0, "stills": 0}
    if mode == "none":
        await asyncio.sleep(seconds)
        return got
    until = time.monotonic() + seconds
    viewer = watch_video if mode == "video" else watch_stills
    await asyncio.gather(*(viewer(port, cam, until, got) for cam in cameras))
    return got


def turn(folder: str, mode: str, args: argparse.Namespace, port: int) -> dict:
    cameras = [f"cam{i:02d}" for i in range(args.cameras)]
    cfg = {"sources": [{"id": cam, "uri": clip("360p"), "realtime": True, "loop": True} for cam in cameras],
           "models": {"det": {"path": os.path.join(folder, "null.onnx"), "layout": "e2e", "input_size": 64}},
           "graph": [{"detect": {"model": "det"}}, "annotate"],
           "outputs": {"dir": os.path.join(folder, mode), "video": {"enabled": False}, "jsonl": {"enabled": False},
                       "store": False, "web": {"port": port, "fps": STILL_FPS}}}
    path = os.path.join(folder, f"{mode}.yaml")
    Path(path).write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", path, "-q"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(port, proc)
        time.sleep(args.warmup)
        if args.seconds > 8:  # the viewers' first seconds (a new socket's GOP, the first stills) left out
            asyncio.run(watch(mode, port, cameras, 3))
        cpu, lost, wall = cpu_seconds(proc.pid), dropped(port), time.monotonic()
        got = asyncio.run(watch(mode, port, cameras, args.seconds))
        cpu, lost, wall = cpu_seconds(proc.pid) - cpu, dropped(port) - lost, time.monotonic() - wall
    finally:
        proc.terminate()
        proc.wait(30)
    return {"mode": mode, "cpu_percent": round(100 * cpu / wall, 1), "dropped": lost, **got}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cameras", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=30.0, help="measured per turn")
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds of each run before it is measured")
    ap.add_argument("--port", type=int, default=0, help="the pipeline's web port (0: a free one)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the three turns; medians are reported")
    args = ap.parse_args()
    args.port = args.port or free_port()
    modes = ("none", "video", "stills")
    with tempfile.TemporaryDirectory(prefix="live-video-cpu-") as folder:
        make_slow_model(os.path.join(folder, "null.onnx"), matmuls=0)
        taken = [[turn(folder, mode, args, args.port) for mode in modes] for _ in range(args.rounds)]
    rows = [{k: (mode if k == "mode" else statistics.median(r[i][k] for r in taken)) for k in taken[0][i]}
            for i, mode in enumerate(modes)]
    print(f"{args.cameras} cameras 640x360 15 fps, {args.seconds:g} s each, the pipeline's process "
          f"(median of {args.rounds}):")
    for r in rows:
        print(f"  {r['mode']:7s} cpu {r['cpu_percent']:6.1f}%  dropped {r['dropped']:5g}  fragments {r['fragments']:6g}"
              f"  records {r['records']:6g}  stills {r['stills']:6g}")


if __name__ == "__main__":
    main()
