"""The CPU a recording costs one 1080p camera, measured in turns (median of `--rounds`, 3):

1. whole runs, `outputs.record` on and off: a 10 s 1080p15 clip (made from the sample,
   B-frames, a keyframe every 2 s) looped for 600 frames, no annotated video, a detector
   that costs nothing (`pipeline run`, user + system CPU of the process);
2. per packet: demux alone against demux + the recording (its tap on the reading thread,
   its writer on its own).

    python scripts/recording_cpu.py [--frames 600] [--clip-frames 150] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from onnx_models import make_slow_model  # noqa: E402
from pipeline.config import SourceConfig  # noqa: E402
from pipeline.config.outputs import RecordConfig  # noqa: E402
from pipeline.recording.recorder import Recording  # noqa: E402
from pipeline.sources.connection import Connection  # noqa: E402


def make_clip(path: str, frames: int = 150) -> None:
    with av.open(str(ROOT / "samples" / "vtest.mp4")) as src, av.open(path, "w") as dst:
        s = dst.add_stream("libx264", rate=15)
        s.width, s.height, s.pix_fmt = 1920, 1080, "yuv420p"
        s.options = {"preset": "veryfast", "g": "30", "bf": "2", "crf": "23"}
        for i, f in enumerate(src.decode(video=0)):
            if i >= frames:
                break
            g = f.reformat(width=1920, height=1080, format="yuv420p")
            g.pts, g.time_base = i, Fraction(1, 15)
            for p in s.encode(g):
                dst.mux(p)
        for p in s.encode(None):
            dst.mux(p)


def run_cpu(folder: str, clip: str, record: bool, frames: int) -> float:
    """User + system CPU seconds of one `pipeline run`."""
    cfg = {"sources": [{"id": "cam", "uri": clip, "loop": True}],
           "models": {"det": {"path": os.path.join(folder, "null.onnx"), "layout": "e2e", "input_size": 64}},
           "graph": [{"detect": {"model": "det"}}],
           "outputs": {"dir": os.path.join(folder, "out"), "video": {"enabled": False},
                       "jsonl": {"filename": "{camera}.jsonl"}, "record": {"enabled": record}}}
    path = os.path.join(folder, "run.yaml")
    Path(path).write_text(yaml.safe_dump(cfg))
    shutil.rmtree(os.path.join(folder, "out"), ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", path, "--max-frames", str(frames)],
                   cwd=ROOT, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def per_packet(folder: str, clip: str, record: bool, passes: int = 4) -> tuple[float, float, int]:
    """(process CPU, reading thread CPU, packets) of demuxing the clip `passes` times."""
    out = os.path.join(folder, "micro")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    rec = Recording("cam", out, RecordConfig(enabled=True), None, False, path=lambda s: f"{out}/cam.rec.{s}.mp4",
                    on_failure=print) if record else None
    cpu, thread, n = time.process_time(), time.thread_time(), [0]
    for _ in range(passes):
        connection = Connection(SourceConfig(id="cam", uri=clip), lambda why: None, tap=rec, decode=False)
        connection.demux(lambda: n.__setitem__(0, n[0] + 1))
        connection.close()
    thread = time.thread_time() - thread
    if rec is not None:
        rec.close()
    return time.process_time() - cpu, thread, n[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=600, help="frames of each whole run")
    ap.add_argument("--clip-frames", type=int, default=150, help="frames of the 1080p15 clip (looped)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds taken in turns; the median is reported")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="recording-cpu-") as folder:
        clip = os.path.join(folder, "hd.mp4")
        make_clip(clip, args.clip_frames)
        make_slow_model(os.path.join(folder, "null.onnx"), matmuls=0)
        runs: dict[bool, list[float]] = {True: [], False: []}
        micro: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
        for _ in range(args.rounds):
            for record in (True, False):
                runs[record].append(run_cpu(folder, clip, record, args.frames))
                micro[record].append(per_packet(folder, clip, record))
        on, off = statistics.median(runs[True]), statistics.median(runs[False])
        print(f"runs of {args.frames} 1080p frames: record on {on:.2f} s CPU, off {off:.2f} s: "
              f"{on / off:.3f}x ({(on - off) / args.frames * 1e3:+.2f} ms per frame)")
        n = micro[True][0][2]
        total = statistics.median(m[0] for m in micro[True]) - statistics.median(m[0] for m in micro[False])
        thread = statistics.median(m[1] for m in micro[True]) - statistics.median(m[1] for m in micro[False])
        print(f"per packet ({n}): the recording adds {total / n * 1e6:.0f} us of CPU, {thread / n * 1e6:.0f} us of it "
              f"on the reading thread")


if __name__ == "__main__":
    main()
