"""`pipeline run | validate | models | bench` (also `python -m pipeline`).

Exit status: 0 done, 1 a run whose cameras all failed, 2 bad configuration or model
(nothing started), 130 interrupted by a signal (outputs finalised).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

from pipeline.config import ConfigError, load_config


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)


def _config_errors(e: ConfigError) -> int:
    for p in e.problems:
        print(f"error: {p}", file=sys.stderr)
    return 2


def cmd_validate(args: argparse.Namespace) -> int:
    """Everything `run` checks before starting, plus that every file camera is readable
    (at run time an unreadable camera is closed and the others go on)."""
    from pipeline.engines.session import ModelError
    from pipeline.graph import Pipeline
    from pipeline.sources.video import probe

    try:
        config = load_config(args.config)
        Pipeline(config).close()
    except ConfigError as e:
        return _config_errors(e)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    problems = [f"sources[{i}].uri: {msg}" for i, s in enumerate(config.sources)
                if not s.live and (msg := probe(s.uri))]
    if problems:
        return _config_errors(ConfigError(problems))
    print(f"{args.config}: ok ({len(config.sources)} camera(s), {len(config.models)} model(s), "
          f"{len(config.graph)} stage(s))")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from pipeline.engines.session import ModelError
    from pipeline.graph import Pipeline
    from pipeline.metrics.report import progress_line, summary_table

    try:
        config = load_config(args.config)
        if args.cameras:
            config = config.subset(args.cameras.split(","))
        if args.report:
            config.metrics.report = os.path.abspath(args.report)
        pipeline = Pipeline(config, output_dir=args.output, max_frames=args.max_frames)
    except ConfigError as e:
        return _config_errors(e)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log = logging.getLogger("pipeline")
    signals: list[int] = []

    def on_signal(signum: int, _frame) -> None:
        signals.append(signum)
        if len(signals) == 1:
            log.warning("%s: stopping the cameras and draining (again to abort faster)", signal.Signals(signum).name)
            pipeline.stop()
        else:
            log.warning("%s again: aborting, finalising the output files now", signal.Signals(signum).name)
            pipeline.stop(abort=True)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    exporter = None
    if config.metrics.prometheus_port is not None:
        from pipeline.metrics.prometheus import PrometheusExporter

        exporter = PrometheusExporter(pipeline.snapshot, config.metrics.prometheus_port)
        log.info("metrics on http://127.0.0.1:%d/metrics", exporter.port)
    tty = sys.stderr.isatty() and not args.quiet
    pipeline.start()
    last_log = time.monotonic()
    try:
        while not pipeline.wait(0.5):
            snap = pipeline.snapshot()
            if tty:
                print("\r\x1b[2K" + progress_line(snap)[:200], end="", file=sys.stderr, flush=True)
            elif time.monotonic() - last_log >= config.metrics.log_interval_s:
                log.info(progress_line(snap))
                last_log = time.monotonic()
    finally:
        if tty:
            print(file=sys.stderr)
        pipeline.close()
        for s, h in old.items():
            signal.signal(s, h)
    snap = pipeline.snapshot()
    if exporter is not None:
        exporter.close()
    print(summary_table(snap))
    if config.metrics.report:
        os.makedirs(os.path.dirname(config.metrics.report) or ".", exist_ok=True)
        with open(config.metrics.report, "w") as f:
            json.dump(snap, f, indent=2)
        log.info("report written to %s", config.metrics.report)
    if signals:
        return 130
    cams = snap["cameras"].values()
    return 1 if cams and all(c["state"] == "failed" for c in cams) else 0


def cmd_models(args: argparse.Namespace) -> int:
    from pipeline import catalog

    if args.action == "list":
        for e in catalog.MODELS:
            present = (catalog.MODELS_DIR / e.file).is_file()
            print(f"{e.name:<22}{'present' if present else 'missing':<9}{e.file:<28}{e.about}")
        return 0
    problems = catalog.fetch_all(samples=not args.no_samples)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 1 if problems else 0


def cmd_bench(args: argparse.Namespace) -> int:
    from pipeline.bench.runner import main as bench_main

    return bench_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipeline", description="Multi-camera video analytics on ONNX Runtime")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the graph of a config")
    run.add_argument("--config", required=True)
    run.add_argument("--output", help="output folder (default: outputs.dir of the config)")
    run.add_argument("--max-frames", type=int, help="stop each camera after N frames")
    run.add_argument("--cameras", help="comma-separated camera ids to run (default: all)")
    run.add_argument("--report", help="write the metrics report as JSON here")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    run.set_defaults(func=cmd_run)
    val = sub.add_parser("validate", help="check a config without running it")
    val.add_argument("--config", required=True)
    val.set_defaults(func=cmd_validate)
    models = sub.add_parser("models", help="list or fetch the catalogued models and sample clips")
    models.add_argument("action", choices=["list", "fetch"])
    models.add_argument("--no-samples", action="store_true", help="fetch models only")
    models.set_defaults(func=cmd_models)
    bench = sub.add_parser("bench", help="sync baseline vs pipeline vs the machine's limit")
    bench.add_argument("--config", required=True)
    bench.add_argument("--cameras", type=int, default=4)
    bench.add_argument("--frames", type=int, default=200, help="frames per camera")
    bench.add_argument("--out", default="bench")
    bench.add_argument("--live", action="store_true", help="add the paced overload case (latency under load)")
    bench.add_argument("--live-seconds", type=float, default=20.0, help="length of the live case")
    bench.add_argument("--sweep", nargs="*", metavar="KEY=V1,V2",
                       help="extra pipeline runs, e.g. max_batch=1,4,8 max_wait_ms=0,10")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
