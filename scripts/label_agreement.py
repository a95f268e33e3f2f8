"""Compare classify-once-per-track labels with classify-every-frame labels.

Run the same config twice (only `per_track` differs) and give both JSON lines files.
Boxes are identical between the runs (the detector is deterministic), so detections are
compared row by row. Prints:
- how often a row's per-track label equals its per-frame label;
- how often it equals the majority of the per-frame labels of its track;
- the ceiling: how often the per-frame labels equal their own track's majority (no
  single label per track can agree with per-frame labels more often than this).

    python scripts/label_agreement.py every_frame/detections.jsonl per_track/detections.jsonl [--classifier NAME]
"""
from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("every_frame")
    ap.add_argument("per_track")
    ap.add_argument("--classifier", help="the classify stage's name (default: the first label set found)")
    args = ap.parse_args()

    def label(d: dict) -> str | None:
        sets = d.get("labels", {})
        name = args.classifier or next(iter(sets), None)
        return sets.get(name, {}).get("label") if name else None

    rows = []
    with open(args.every_frame) as fa, open(args.per_track) as fb:
        for la, lb in zip(fa, fb):
            ra, rb = json.loads(la), json.loads(lb)
            for da, db in zip(ra["detections"], rb["detections"]):
                if da["box"] != db["box"]:
                    raise SystemExit(f"{ra['camera']} frame {ra['seq']}: the runs' boxes differ; same config?")
                if label(da) and "track" in db:
                    rows.append(((ra["camera"], db["track"]), label(da), label(db)))
    if not rows:
        raise SystemExit("no classified, tracked rows in common")
    per_track_frames = defaultdict(list)
    for key, frame_label, _ in rows:
        per_track_frames[key].append(frame_label)
    majority = {k: Counter(v).most_common(1)[0][0] for k, v in per_track_frames.items()}
    n = len(rows)
    exact = sum(f == t for _, f, t in rows) / n
    vs_majority = sum(majority[k] == t for k, _, t in rows) / n
    ceiling = sum(majority[k] == f for k, f, _ in rows) / n
    print(f"{n} rows, {len(majority)} tracks: per-track == per-frame label {exact:.1%}; "
          f"per-track == the track's per-frame majority {vs_majority:.1%}; "
          f"ceiling (per-frame labels == their own track's majority) {ceiling:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
