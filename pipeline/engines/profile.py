"""What a batch costs, by size, measured on the model itself at start-up, and the batch
size worth waiting for.

On a CPU a batch costs about the sum of its items (1 is preferred: frames are never held
back for a batch); on a GPU a batch saves most of the cost. Every size runs once untimed
first (ORT allocates on a size's first run), then the sizes take turns and each keeps its
fastest run: a busy moment of the machine cannot make one size look cheaper than another.
The costs are measured once for each model setup (the file as it is on disk, its
settings, its thread plan and providers) on a machine (its CPU, its cores, the ONNX Runtime
version): kept in the process and in `~/.cache/pipeline/batch_costs.json`
(`PIPELINE_BATCH_COSTS`), so a later run or pipeline with the same setup (the density
benchmark's levels, a library user, each start of `pipeline run`) runs each size once,
untimed, for ORT's buffers, and takes the costs measured before: a second of start-up
saved per model. A file that cannot be read or written is measured again, never an error.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import onnxruntime as ort

from pipeline.engines.batching import BatchPolicy
from pipeline.runtime.threads import cpu_name

if TYPE_CHECKING:
    from pipeline.engines.engine import Engine

BATCH_GAIN_TOLERANCE = 1.1
_MEASURED: dict[str, dict[int, float]] = {}  # a model setup's batch costs, measured or read in this process
KEPT = 64  # setups the file keeps (the newest)


def costs_file() -> Path:
    return Path(os.environ.get("PIPELINE_BATCH_COSTS") or Path.home() / ".cache" / "pipeline" / "batch_costs.json")


def _read_kept() -> dict[str, dict[int, float]]:
    """The file's setups and costs; a damaged file or entry counts as none."""
    try:
        with open(costs_file()) as f:
            data = json.load(f)
        kept = {k: {int(s): float(c) for s, c in v.items()} for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}
    return {k: v for k, v in kept.items() if v and all(0 < c < float("inf") for c in v.values())}


def _keep(setup: str, costs: dict[int, float]) -> None:
    """Add a setup's costs to the file (written whole, then moved into place: a reader
    never sees half of it; two runs writing at once keep one's costs, the other's are
    measured again next time)."""
    kept = _read_kept()
    kept.pop(setup, None)
    kept[setup] = costs
    path = costs_file()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".batch_costs-")
        with os.fdopen(fd, "w") as f:
            json.dump(dict(list(kept.items())[-KEPT:]), f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def choose_batch(costs: dict[int, float]) -> int:
    """The smallest batch size whose cost per item is within 10% of the cheapest: frames
    are held back for a fuller batch only where that really saves compute."""
    per_item = {s: c / s for s, c in costs.items()}
    best = min(per_item.values())
    return min(s for s, c in per_item.items() if c <= BATCH_GAIN_TOLERANCE * best)


def regions_per_run(costs: dict[int, float]) -> int:
    """The most items a batch may hold at no more than `BATCH_GAIN_TOLERANCE` times the
    cost of one: the regions one frame may have in place of one run on the whole frame
    (1 on a CPU, where a batch costs the sum of its items)."""
    if 1 not in costs:
        return 1
    return max(s for s, c in costs.items() if s == 1 or c <= BATCH_GAIN_TOLERANCE * costs[1])


def measure_batch_costs(sizes: list[int], warm: Callable[[int], object], timed: Callable[[int], float],
                        repeats: int = 3) -> dict[int, float]:
    """Seconds per batch by size: `warm(size)` runs a batch untimed, `timed(size)` returns
    the seconds one run of the model took (without hand-overs between threads, a fixed
    cost that would favour big batches)."""
    for size in sizes:
        warm(size)
    times: dict[int, list[float]] = {s: [] for s in sizes}
    for _ in range(repeats):
        for size in sizes:
            times[size].append(timed(size))
    return {s: min(t) for s, t in times.items()}


def time_batch(engine: "Engine", size: int) -> float:
    """Seconds the model takes for a batch of `size`, run on this thread: what a batch
    costs, without the hand-over to a worker and back."""
    with engine.slots_held(1) as (slot,):
        pieces = engine.packer.pieces(slot, [_item(engine)] * size)
        t0 = time.perf_counter()
        for piece in pieces:
            engine.run_piece(piece)
        return time.perf_counter() - t0


def warm(engine: "Engine", sizes: list[int]) -> None:
    """Run every buffer set (slot x size) once, on the worker that will run it later: ORT
    keeps CUDA graphs per thread and cuDNN picks its algorithms per shape, so both happen
    now, before any camera starts, not mid-stream."""
    with engine.slots_held(engine.max_inflight) as slots:  # all free at start-up
        for slot in slots:
            for size in sizes:
                pieces = engine.packer.pieces(slot, [_item(engine)] * size)
                engine.on_worker(lambda: [engine.run_piece(p) for p in pieces])


def _setup(engine: "Engine", sizes: list[int]) -> str:
    """What a batch's cost depends on: the model file as it is on disk, its settings, how
    its engine runs (threads, workers) and where (providers, the machine's CPU and ONNX
    Runtime)."""
    st = os.stat(engine.model.path)
    return repr((os.path.abspath(engine.model.path), repr(engine.model), st.st_mtime_ns, st.st_size,
                 repr(engine.plan), tuple(engine.providers), tuple(sizes), cpu_name(), os.cpu_count(),
                 ort.__version__))


def _item(engine: "Engine") -> np.ndarray:
    w, h = engine.model.input_size
    return np.zeros((3, h, w), np.float32)


def profile(engine: "Engine", repeats: int = 3) -> None:
    """Measure what a batch costs the engine's model, by size, and set the engine's batch
    policy to prefer the size worth waiting for; what the runs counted is forgotten."""
    model = engine.model
    sizes = engine.packer.sizes_up_to(model.batching.max_batch)
    setup = _setup(engine, sizes)
    known = _MEASURED.get(setup) or _read_kept().get(setup)
    if known is not None and set(known) == set(sizes):
        _MEASURED[setup] = known
        for size in sizes:
            engine.infer([_item(engine)] * size)
    else:
        _MEASURED[setup] = measure_batch_costs(sizes, lambda s: engine.infer([_item(engine)] * s),
                                               lambda s: time_batch(engine, s), repeats)
        _keep(setup, _MEASURED[setup])
    engine.batch_costs = dict(_MEASURED[setup])
    engine.policy = BatchPolicy.of(model.batching, choose_batch(engine.batch_costs))
    if engine.on_gpu:
        warm(engine, engine.packer.sizes_in_use(model.batching.max_batch))
    engine.stats.reset()
