"""`python -m pipeline.bench.heldout`: `pipeline bench --tracking` on noise its rules were
not tuned on, to tell a better tracker from one fitted to the bench's own seeds.

Seeds other than the bench's (`--seeds 6-15`) and, with `--other-noise`, other noise
parameters of every family and level: more boxes missed and in longer runs, more jitter,
a few false positives instead of many (where a lenient tracker gains) or more of them,
more people hidden for longer with weaker first boxes after it.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

from pipeline.bench import tracking
from pipeline.bench.motdata import FAMILIES, LEVELS, Noise, bundled_ground_truth, read_mot

# per level: the false positives' factor (a few at hard, where they were many, more at typical)
_FALSE_POSITIVES = {"clean": 1.0, "typical": 1.5, "hard": 0.3}


def other(noise: Noise) -> Noise:
    """The same kind of noise with other parameters than the bench's."""
    changed: dict = dict(drop=min(0.5, noise.drop * 1.15), jitter=noise.jitter * 1.25,
                         false_positives=noise.false_positives * _FALSE_POSITIVES[noise.name])
    if noise.run is not None:
        changed["run"] = (noise.run[0] + 2, noise.run[1] + 4)
    if noise.occluded:
        changed.update(occluded=0.65, occlusion=(8, 30), weak_after=(1, 4), weakened=(0.1, 0.5))
    return dataclasses.replace(noise, **changed)


def seed_range(text: str) -> list[int]:
    """`6-15` (or one seed, `7`) as the list of seeds."""
    first, _, last = text.partition("-")
    try:
        seeds = list(range(int(first), int(last or first) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seeds as FIRST-LAST, e.g. 6-15") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r}: no seeds")
    return seeds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.bench.heldout", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=seed_range, default=seed_range("6-15"), help="FIRST-LAST (default 6-15)")
    ap.add_argument("--levels", nargs="+", choices=LEVELS, default=list(LEVELS))
    ap.add_argument("--other-noise", action="store_true", help="other noise parameters than the bench's")
    args = ap.parse_args(argv)
    families = ({f: {lv: other(n) for lv, n in levels.items()} for f, levels in FAMILIES.items()}
                if args.other_noise else FAMILIES)
    sequences = [read_mot(p) for p in bundled_ground_truth()]
    found = tracking.trackers()
    noise = "other noise parameters than the bench's" if args.other_noise else "the bench's noise parameters"
    print(f"seeds {args.seeds[0]}..{args.seeds[-1]}, {noise}; trackers: {', '.join(found)}")
    print(tracking.markdown(tracking.bench(sequences, args.levels, args.seeds, found, families=families)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
