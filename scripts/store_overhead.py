"""What the store costs the pipeline: the same config run with `outputs.store` on and off,
in turns (off, on; on, off; ...), each run's whole-run throughput from its report; the
ratio of the medians (the issue's bar: at least 0.98), the store's size and the rows it
holds. The store on is the default; off is `outputs.store: false`.

    python scripts/store_overhead.py --config configs/tracking.yaml --frames 400 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def run(config: dict, base: Path, store: bool, frames: int, folder: Path) -> float:
    """One run's throughput (frames per second over the run)."""
    cfg = json.loads(json.dumps(config))
    cfg.setdefault("outputs", {})["store"] = store
    path = base / f"store_{'on' if store else 'off'}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    report = folder / "report.json"
    r = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(path), "--output", str(folder),
                        "--max-frames", str(frames), "--report", str(report), "-q"],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"run failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(report.read_text())["throughput_fps"]


def rows(path: Path) -> dict[str, int]:
    db = sqlite3.connect(path)
    return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("tracks", "events", "counts",
                                                                                "segments")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--frames", type=int, default=400, help="frames per camera per run (--max-frames)")
    ap.add_argument("--rounds", type=int, default=3, help="runs with the store and without, in turns")
    args = ap.parse_args()
    config_path = Path(args.config).resolve()
    config = yaml.safe_load(config_path.read_text())
    fps: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        config_dir = config_path.parent  # relative paths of the config keep their meaning
        os.chdir(ROOT)
        for r in range(args.rounds):
            for store in ((False, True) if r % 2 == 0 else (True, False)):
                folder = base / f"out_{r}_{store}"
                cfg = json.loads(json.dumps(config))
                for source in cfg.get("sources", []):
                    if "://" not in source["uri"]:
                        source["uri"] = str((config_dir / source["uri"]).resolve())
                for model in cfg.get("models", {}).values():
                    for key in ("path", "labels"):
                        if isinstance(model.get(key), str):
                            model[key] = str((config_dir / model[key]).resolve())
                fps[store].append(run(cfg, base, store, args.frames, folder))
                print(f"round {r + 1}: store {'on ' if store else 'off'} {fps[store][-1]:.2f} fps", flush=True)
        held = rows(base / f"out_{args.rounds - 1}_True" / "store.db")
        size = os.path.getsize(base / f"out_{args.rounds - 1}_True" / "store.db")
    on, off = statistics.median(fps[True]), statistics.median(fps[False])
    print(f"median: store on {on:.2f} fps, off {off:.2f} fps: on/off {on / off:.3f}")
    print(f"the store of one run: {size / 1e3:.0f} kB, " + ", ".join(f"{n} {t}" for t, n in held.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
