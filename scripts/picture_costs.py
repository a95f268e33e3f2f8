"""What a 1080p frame's pictures cost, in thread CPU time per frame: the detector's input
made from the BGR picture (convert, then letterbox) against from the decoded picture
(`pipeline.pictures`: planes scaled first), and a 540-line picture for the annotated video
made both ways. The ways are taken in turns, `--runs` rounds, the median reported.

    python scripts/picture_costs.py --frames 40 --runs 3
"""
from __future__ import annotations

import argparse
import statistics
import time

import av
import cv2

from pipeline.catalog.entries import SAMPLES_DIR
from pipeline.config import load_config
from pipeline.frames import Frame
from pipeline.pictures import scaled_bgr
from pipeline.preprocess import Preprocessor


def pictures(n: int) -> list[av.VideoFrame]:
    out = []
    with av.open(str(SAMPLES_DIR / "vtest.mp4")) as c:
        for frame in c.decode(video=0):
            out.append(frame.reformat(1920, 1080, "yuv420p"))
            if len(out) == n:
                break
    return out


def cost_ms(work, items) -> float:
    t0 = time.thread_time()
    for item in items:
        work(item)
    return 1000 * (time.thread_time() - t0) / len(items)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/cameras.yaml")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cv2.setNumThreads(1)
    model = load_config(args.config).detector
    bgr_way, picture_way = Preprocessor(model), Preprocessor(model, from_picture=True)
    frames = pictures(args.frames)
    as_frame = lambda vf: Frame(camera="c", seq=0, pts=None, time_base=None, image=None, t_capture=0.0,  # noqa: E731
                                picture=vf)
    ways = {
        "detector input, from BGR": lambda vf: bgr_way.frame(as_frame(vf)),
        "detector input, from the decoded picture": lambda vf: picture_way.frame(as_frame(vf)),
        "960x540 picture, convert then scale": lambda vf: cv2.resize(vf.to_ndarray(format="bgr24", threads=1),
                                                                      (960, 540), interpolation=cv2.INTER_AREA),
        "960x540 picture, from the decoded picture": lambda vf: scaled_bgr(vf, 960, 540, cv2.INTER_AREA),
    }
    got: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.runs):
        for name, work in ways.items():
            got[name].append(cost_ms(work, frames))
    for name, values in got.items():
        print(f"{name}: {statistics.median(values):.2f} ms per 1080p frame ({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
