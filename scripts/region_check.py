"""Regions against the whole frame on a 1080p clip with small, distant people
(`pipeline.bench.region_check`): the clip is made from the sample into a temporary
folder, the config's first camera's settings and analytics apply.

    python scripts/region_check.py --config configs/tracking.yaml --frames 150
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

from pipeline.bench.region_check import check, distant_clip
from pipeline.config import load_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/tracking.yaml")
    ap.add_argument("--sample", default="samples/vtest.mp4")
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--fps", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clip = distant_clip(args.sample, os.path.join(tmp, "distant.mp4"), args.frames)
        print(json.dumps(check(load_config(args.config), clip, args.fps), indent=1))


if __name__ == "__main__":
    main()
