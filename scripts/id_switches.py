"""Estimate identity switches of a tracked run from its JSON lines (no ground truth needed).

A switch is counted when a track is born away from the picture's border while another
track of the same class died within the last `--gap` frames close by (centre distance
under `--reach` box heights): the same object most likely got a new id. The rate is
switches per 100 tracked object-frames (an object seen on 100 frames), the unit of
"fewer than 1 id switch per 100 frames per person".

    python scripts/id_switches.py out/detections.jsonl --camera campus --class person
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--camera")
    ap.add_argument("--class", dest="cls", default="person")
    ap.add_argument("--gap", type=int, default=30, help="frames a lost track may be gone")
    ap.add_argument("--reach", type=float, default=1.5, help="distance in box heights")
    ap.add_argument("--border", type=float, default=0.03, help="births this close to the edge are new objects")
    args = ap.parse_args()
    tracks: dict[tuple[str, int], dict] = {}
    size: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    object_frames = 0
    for line in open(args.jsonl):
        r = json.loads(line)
        if args.camera and r["camera"] != args.camera:
            continue
        for d in r["detections"]:
            x1, y1, x2, y2 = d["box"]
            size[r["camera"]][0] = max(size[r["camera"]][0], x2)
            size[r["camera"]][1] = max(size[r["camera"]][1], y2)
            if d["class"] != args.cls or "track" not in d:
                continue
            object_frames += 1
            t = tracks.setdefault((r["camera"], d["track"]), {"first": r["seq"], "first_box": d["box"]})
            t["last"], t["last_box"] = r["seq"], d["box"]
    switches = 0
    for (cam, tid), t in tracks.items():
        x1, y1, x2, y2 = t["first_box"]
        w, h = size[cam]
        margin = args.border * max(w, h)
        if t["first"] == 0 or x1 < margin or y1 < margin or x2 > w - margin or y2 > h - margin:
            continue  # present from the start, or came in over the edge: a new object
        cx, cy, bh = (x1 + x2) / 2, (y1 + y2) / 2, y2 - y1
        for (cam2, tid2), u in tracks.items():
            if cam2 != cam or tid2 == tid or not (0 < t["first"] - u["last"] <= args.gap):
                continue
            ux1, uy1, ux2, uy2 = u["last_box"]
            if ((ux1 + ux2) / 2 - cx) ** 2 + ((uy1 + uy2) / 2 - cy) ** 2 <= (args.reach * bh) ** 2:
                switches += 1
                break
    rate = 100.0 * switches / object_frames if object_frames else 0.0
    print(f"{len(tracks)} {args.cls} tracks over {object_frames} object-frames: {switches} likely id switches, "
          f"{rate:.2f} per 100 object-frames")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
