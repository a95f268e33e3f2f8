"""`pipeline models inspect` and `pipeline models optimize`: their arguments in, their lines out.

Exit status: 0 done; 1 a variant that agrees less than `--min-agreement` (not written);
2 bad input (an unreadable file or clip, damaged metadata, a model the file cannot
describe), one line each.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.errors import PipelineError


def _errors(lines: list[str]) -> int:
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    return 2


def inspect_command(args: argparse.Namespace) -> int:
    from pipeline.modelfile.inspect import inspect_model, load_picture, report

    if not os.path.isfile(args.path):
        return _errors([f"{args.path}: file not found"])
    try:
        picture, name = load_picture(args.picture)
        print(report(inspect_model(args.path, picture, name)))
    except (PipelineError, ValueError) as e:
        return _errors([str(e)])
    return 0


def model_settings(path: str, config: str | None, name: str | None, layout: str | None = None
                   ) -> tuple[object, list[str]]:
    """The model as a config would read it: only `path` (the file tells the rest; `layout`
    where it cannot), or the settings of model `name` in `config` with this `path`."""
    from pipeline.config import ConfigError, ModelConfig, load_yaml
    from pipeline.config.schema import Reader

    raw: dict = {}
    base = Path.cwd()
    if config:
        try:
            data = load_yaml(config)
        except ConfigError as e:
            return None, e.problems
        models = (data or {}).get("models") or {}
        if name not in models:
            return None, [f"--model: {config} has no model {name!r} (models: {', '.join(map(str, models)) or 'none'})"]
        raw = dict(models[name] or {})
        base = Path(config).resolve().parent
    raw["path"] = os.path.abspath(path)
    if layout:
        raw["layout"] = layout
    r = Reader(base)
    model = r.record(ModelConfig, raw, f"models.{name or Path(path).stem}", {"name": name or Path(path).stem})
    return model, r.problems


def _layout_by_inspection(path: str, problems: list[str]) -> tuple[object, list[str]]:
    """Where the file alone cannot tell its layout, the one `inspect` finds on a picture."""
    from pipeline.modelfile.inspect import inspect_model, load_picture

    picture, name = load_picture(None)
    found = inspect_model(path, picture, name)
    if found.layout is None:
        return None, problems
    print(f"layout {found.layout}: {found.layout_why}")
    return model_settings(path, None, None, found.layout)


def _show(o, path: str, threads: int) -> None:
    from pipeline.runtime.threads import cpu_name

    frames = (f"on {o.held_out_frames} held-out frames ({o.calibration_frames} other frames calibrated)"
              if o.calibration_frames else f"on {o.held_out_frames} frames")
    print(f"{o.precision} variant of {path}: {o.agreement.shows()} {frames}")
    if o.kept_fp32:
        more = ", ..." if len(o.kept_fp32) > 6 else ""
        print(f"kept float32: {len(o.kept_fp32)} node(s) nearest the input ({', '.join(o.kept_fp32[:6])}{more})")
    assert o.speed is not None, "the command always times both models"
    before, after = o.speed
    print(f"ms per frame, model alone, batch 1, {threads} thread(s) on {cpu_name()} (turns interleaved, median of 3 "
          f"rounds): original {before.wall_ms:.1f} (CPU {before.cpu_ms:.1f}), {o.precision} {after.wall_ms:.1f} "
          f"(CPU {after.cpu_ms:.1f}): {before.wall_ms / after.wall_ms:.2f}x wall, "
          f"{before.cpu_ms / after.cpu_ms:.2f}x CPU")


def optimize_command(args: argparse.Namespace) -> int:
    from pipeline.modelfile.optimize import optimize

    if not os.path.isfile(args.path):
        return _errors([f"{args.path}: file not found"])
    if args.config and not args.model:
        return _errors(["--model: which model of --config? (its name under `models`)"])
    model, problems = model_settings(args.path, args.config, args.model)
    if problems and not args.config and all(".layout: required" in p for p in problems):
        model, problems = _layout_by_inspection(args.path, problems)
    missing = [c for c in args.calibrate if not os.path.isfile(c)]
    problems += [f"--calibrate {c}: file not found" for c in missing]
    if not 0 < args.min_agreement <= 1:
        problems.append(f"--min-agreement: must be within 0..1, got {args.min_agreement}")
    precision = "fp16" if args.fp16 else "int8"
    out = args.out or f"{os.path.splitext(args.path)[0]}.{precision}.onnx"
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        problems.append(f"--out {out}: its folder does not exist")
    if args.frames < 2:
        problems.append(f"--frames: need at least 2, got {args.frames}")
    if problems:
        return _errors(problems)
    threads = args.threads or os.cpu_count() or 1
    try:
        o = optimize(args.path, model, precision, args.calibrate, out, args.min_agreement, args.frames, threads)
    except PipelineError as e:
        return _errors([str(e)])
    _show(o, args.path, threads)
    if o.written is None:
        print(f"error: agreement {o.agreement.score:.4f} is below --min-agreement {args.min_agreement}: "
              f"{out} not written", file=sys.stderr)
        return 1
    print(f"written: {o.written}")
    return 0
