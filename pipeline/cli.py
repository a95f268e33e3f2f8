"""`pipeline run | validate | models | bench` (also `python -m pipeline`).

Exit status: 0 done, 1 a run whose cameras all failed or whose outputs could not all be
written, 2 bad configuration, model or output (every problem listed, nothing started),
130 interrupted by a signal (outputs finalised).

Only the standard library is imported at module level: a Ctrl-C while the heavy
libraries load or models open ends the command at once, quietly, with status 130.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

INTERRUPTED = 130


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    from pipeline.redact import RedactingFilter

    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())


def _quit_on_signal(signum: int, _frame) -> None:
    """Before any camera starts nothing needs finalising: leave now, quietly."""
    print(f"\n{signal.Signals(signum).name}: stopped before starting", file=sys.stderr)
    os._exit(INTERRUPTED)


def _problems(problems: list[str]) -> int:
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 2


def cmd_validate(args: argparse.Namespace) -> int:
    """Everything `run` checks before starting, plus one frame of every file camera and
    the metrics port; nothing is written."""
    from pipeline.config import ConfigError
    from pipeline.preflight import check

    try:
        checked = check(args.config, for_run=False)
    except ConfigError as e:
        return _problems(e.problems)
    if checked.problems:
        return _problems(checked.problems)
    c = checked.config
    print(f"{args.config}: ok ({len(c.sources)} camera(s), {len(c.used_models())} model(s), "
          f"{len(c.graph)} stage(s))")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from pipeline.config import ConfigError
    from pipeline.engines.session import ModelError
    from pipeline.graph import Pipeline
    from pipeline.metrics.report import progress_line, summary_table
    from pipeline.preflight import check

    if args.max_frames is not None and args.max_frames < 1:
        return _problems([f"--max-frames: must be >= 1, got {args.max_frames}"])
    cameras = [c for c in args.cameras.split(",") if c] if args.cameras is not None else None
    if cameras is not None and not cameras:
        return _problems(["--cameras: expected camera ids separated by commas"])
    try:
        checked = check(args.config, args.output, args.report, cameras, for_run=True, cluster=bool(args.cluster))
        if checked.problems:
            return _problems(checked.problems)
        config = checked.config
        if args.cluster:
            from pipeline.cluster.ray_run import run_cluster

            checked.close()  # the hosts open their own sessions
            return run_cluster(config, args.cluster, args.max_frames, args.hosts, args.cpus_per_host,
                               config.metrics.report)
        pipeline = Pipeline(config, max_frames=args.max_frames, sessions=checked.sessions)
    except ConfigError as e:
        return _problems(e.problems)
    except ModelError as e:
        return _problems([str(e)])
    log = logging.getLogger("pipeline")
    exporter = None
    if config.metrics.prometheus_port is not None:
        from pipeline.metrics.prometheus import PrometheusExporter

        try:
            exporter = PrometheusExporter(pipeline.snapshot, config.metrics.prometheus_port)
        except OSError as e:
            pipeline.close()
            return _problems([f"metrics.prometheus_port: cannot serve on port {config.metrics.prometheus_port}: "
                              f"{e.strerror or e}"])
        log.info("metrics on http://127.0.0.1:%d/metrics", exporter.port)
    signals: list[int] = []

    def on_signal(signum: int, _frame) -> None:
        signals.append(signum)
        if len(signals) == 1:
            log.warning("%s: stopping the cameras and draining (again to abort faster)", signal.Signals(signum).name)
            pipeline.stop()
        else:
            log.warning("%s again: aborting, finalising the output files now", signal.Signals(signum).name)
            pipeline.stop(abort=True)

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, on_signal)
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
        pipeline.close(timeout=5.0 if len(signals) > 1 else 30.0)
    for s in (signal.SIGINT, signal.SIGTERM):  # the files are final: a late Ctrl-C changes nothing now
        signal.signal(s, signal.SIG_IGN)
    snap = pipeline.snapshot()
    if exporter is not None:
        exporter.close()
    print(summary_table(snap))
    if config.metrics.report:
        try:
            with open(config.metrics.report, "w") as f:
                json.dump(snap, f, indent=2)
            log.info("report written to %s", config.metrics.report)
        except OSError as e:
            log.error("metrics.report: could not write %s: %s", config.metrics.report, e.strerror or e)
    if signals:
        return INTERRUPTED
    cams = snap["cameras"].values()
    if pipeline.outputs_failed:
        return 1
    return 1 if cams and all(c["state"] == "failed" for c in cams) else 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from pipeline.cluster.ray_run import cluster_command
    from pipeline.config import SourceConfig
    from pipeline.config.schema import Reader

    if args.action == "add":
        if not args.source:
            return _problems(["--source: required for add, e.g. '{id: door, uri: rtsp://10.0.0.7/stream1}'"])
        try:
            raw = yaml.safe_load(args.source)
        except yaml.YAMLError as e:
            return _problems([f"--source: invalid YAML: {e}"])
        r = Reader(Path.cwd())
        source = r.record(SourceConfig, raw, "--source")
        if r.problems:
            return _problems(r.problems)
        source.queue = source.resolved_queue()
        args.source = source
    elif args.action == "remove" and not args.camera:
        return _problems(["remove: which camera? pipeline cluster remove CAMERA"])
    return cluster_command(args)


def cmd_models(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pipeline import catalog

    dest = Path(args.dest) if args.dest else catalog.MODELS_DIR
    if args.action == "list":
        for e in catalog.MODELS:
            present = (dest / e.file).is_file()
            print(f"{e.name:<22}{'present' if present else 'missing':<9}{e.file:<28}{e.about}")
            print(f"{'':<22}source: {e.source}")
        return 0
    fetcher = catalog.Fetcher(dest=dest)
    if args.no_mirror:
        fetcher.mirrors = []
    fetcher.mirrors = [Path(m) for m in args.mirror or []] + fetcher.mirrors
    if args.url_base:
        fetcher.url_base = args.url_base
    problems = catalog.fetch_all(args.names or None, samples=not args.no_samples and not args.names, fetcher=fetcher)
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
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="run the cameras on a Ray cluster: local, auto, or a Ray address (pip install '.[cluster]')")
    run.add_argument("--hosts", type=int, help="with --cluster: pipeline hosts to start (default: one per GPU, "
                                               "else one per --cpus-per-host CPUs)")
    run.add_argument("--cpus-per-host", type=int, default=1, help="with --cluster: CPUs each host takes")
    run.set_defaults(func=cmd_run)
    cluster = sub.add_parser("cluster", help="add, remove or show cameras of a running `run --cluster`")
    cluster.add_argument("action", choices=["add", "remove", "status"])
    cluster.add_argument("camera", nargs="?", help="remove: the camera id")
    cluster.add_argument("--address", default="auto", help="the Ray cluster (default: auto)")
    cluster.add_argument("--source", help="add: the camera as YAML, e.g. '{id: door, uri: rtsp://...}'")
    cluster.set_defaults(func=cmd_cluster)
    val = sub.add_parser("validate", help="check a config without running it")
    val.add_argument("--config", required=True)
    val.set_defaults(func=cmd_validate)
    models = sub.add_parser("models", help="list or fetch the catalogued models and sample clips")
    models.add_argument("action", choices=["list", "fetch"])
    models.add_argument("names", nargs="*", help="catalogued models to fetch (default: all, and the sample clips)")
    models.add_argument("--no-samples", action="store_true", help="fetch models only")
    models.add_argument("--dest", help="models folder (default: models/ of the project)")
    models.add_argument("--mirror", action="append", help="a folder holding catalogued files (first choice)")
    models.add_argument("--no-mirror", action="store_true", help="ignore $PIPELINE_MODEL_MIRROR and ../shared")
    models.add_argument("--url-base", help="fetch public files from here instead of their hosts (a local mirror)")
    models.set_defaults(func=cmd_models)
    bench = sub.add_parser("bench", help="sync baseline vs pipeline vs the machine's limit")
    bench.add_argument("--config", required=True)
    bench.add_argument("--cameras", type=int, default=4)
    bench.add_argument("--frames", type=int, default=200, help="frames per camera")
    bench.add_argument("--out", default="bench")
    bench.add_argument("--live", action="store_true", help="add the paced overload case (latency under load)")
    bench.add_argument("--live-seconds", type=float, default=20.0, help="length of each live run")
    bench.add_argument("--load-sweep", action="store_true",
                       help="the latency-load curve: tuned loop and pipeline at 25..150%% of the limit")
    bench.add_argument("--no-cases", action="store_true",
                       help="skip the detector and classifier throughput cases (run only --live, --load-sweep, --web)")
    bench.add_argument("--web", action="store_true",
                       help="the live view: its cost when nobody watches, its latency when someone does")
    bench.add_argument("--sweep", nargs="*", metavar="KEY=V1,V2",
                       help="extra pipeline runs, e.g. max_batch=1,4,8 max_wait_ms=0,10")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _quit_on_signal)
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    if args.command in ("models", "bench"):  # long work without outputs to finalise: clean up and stop
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
