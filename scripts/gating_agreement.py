"""Detecting only when something moves against detecting every frame, clip by clip
(`pipeline.bench.gating`): each clip is run as the config's only camera (the config's
analytics of its first camera apply), every frame, gated, and gated and paced.

    python scripts/gating_agreement.py --config configs/tracking.yaml samples/vtest.mp4 --camera campus \
        [--border-s 0] [--json F] [--plot F.png]
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace

from pipeline.bench.gating import agreement, markdown, plot
from pipeline.config import load_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("clips", nargs="+")
    ap.add_argument("--config", default="configs/tracking.yaml")
    ap.add_argument("--camera", help="the camera of the config whose analytics and settings apply (default: first)")
    ap.add_argument("--fps", type=float, default=5.0)
    ap.add_argument("--refresh-s", type=float, default=10.0)
    ap.add_argument("--regions", action="store_true")
    ap.add_argument("--border-s", type=float, help="the detect stage's `border_s` (default: the config's)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--plot", help="chart the detector's runs per second over each clip into this PNG")
    args = ap.parse_args()
    config = load_config(args.config)
    camera = next(s for s in config.sources if args.camera in (None, s.id))
    print("| clip | detector runs (every / gated) | CPU s per video s | crossings + entries | tracks > 1 s found "
          "| fast = paced |")
    print("|---|---:|---:|---:|---:|---|")
    results = {}
    for clip in args.clips:
        one = replace(config, sources=[replace(camera, uri=os.path.abspath(clip))])
        results[clip] = agreement(one, args.fps, args.refresh_s, args.regions, args.border_s)
        print("\n".join(markdown(os.path.basename(clip), results[clip])), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
