"""Precision variants of catalogued models (`pipeline models fetch yolox_nano.int8`): the
catalog names them, this builds them, given to its fetcher by `pipeline models fetch`."""
from __future__ import annotations

import os
from pathlib import Path

from pipeline.catalog import SAMPLES, FetchError, ModelEntry, fetch_sample
from pipeline.config import ModelConfig
from pipeline.config.schema import Reader
from pipeline.modelfile.optimize import optimize


def build(entry: ModelEntry, src: Path, dst: Path) -> None:
    """An fp16 or int8 variant of `src`, frames from the sample clips (int8: every other one
    calibrates); nothing is written below the entry's `min_agreement` on the held-out frames.
    Its speed is left to `pipeline models optimize`, which reports it: fetch only builds."""
    v = entry.variant
    assert v is not None, f"{entry.name} is not a precision variant"
    r = Reader(src.parent)
    model = r.record(ModelConfig, {**v.settings, "path": str(src)}, "variant", {"name": src.stem})
    if r.problems:
        raise FetchError("; ".join(r.problems))
    clips = [str(fetch_sample(name)) for name in SAMPLES]
    outcome = optimize(str(src), model, v.precision, clips, str(dst), v.min_agreement, threads=os.cpu_count() or 1,
                       timed=False)
    if outcome.written is None:
        raise FetchError(f"the {v.precision} variant agrees only {outcome.agreement.shows()}, below {v.min_agreement}")
