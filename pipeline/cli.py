"""`pipeline run | status | validate | cluster | export | models | bench` (also `python -m pipeline`).

Exit status (`pipeline.runloop`): 0 done, 1 a run whose cameras all failed, whose
outputs could not all be written or that lost an event, 2 bad configuration, model or
output, or a start-up failure (every problem listed on its own `error:` line, nothing
started), 130 interrupted by Ctrl-C (outputs finalised). A `run` stopped by SIGTERM (a
service manager) ends as a finished run does: 0 when everything was written. A reader
of stdout that leaves early (`| head`) ends a command quietly, 0 (a run: 1); stdout that
cannot be written (a full disk) is one `error:` line and 1.

Only the standard library and the exit codes are imported at module level: a
Ctrl-C while the heavy libraries load or models open ends the command at once, quietly,
with status 130.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import sys

from pipeline.errors import BAD_INPUT, DONE, FAILED, INTERRUPTED


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    from pipeline.redact import RedactingFilter

    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())


def _quit_on_signal(signum: int, _frame, status: int = INTERRUPTED) -> None:
    """Before any camera starts nothing needs finalising: leave now, quietly."""
    print(f"\n{signal.Signals(signum).name}: stopped before starting", file=sys.stderr)
    os._exit(status)


def _problems(problems: list[str], status: int = BAD_INPUT) -> int:
    from pipeline.redact import redact

    for p in problems:
        print(f"error: {redact(p)}", file=sys.stderr)
    return status


def _failed(e) -> int:
    """A `PipelineError`: its lines, its exit status."""
    return _problems(e.problems, e.exit_status)


def cmd_validate(args: argparse.Namespace) -> int:
    """Everything `run` checks before starting, plus one frame of every file camera and
    the metrics port; nothing is written."""
    from pipeline.errors import PipelineError
    from pipeline.preflight import check
    from pipeline.config.secrets import register_config

    try:
        checked = check(args.config, for_run=False)
    except PipelineError as e:
        return _failed(e)
    register_config(checked.config)
    if checked.problems:
        return _problems(checked.problems)
    c = checked.config
    print(f"{args.config}: ok ({len(c.sources)} camera(s), {len(c.used_models())} model(s), "
          f"{len(c.graph)} stage(s))")
    return 0


def _run_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.max_frames is not None and args.max_frames < 1:
        problems.append(f"--max-frames: must be >= 1, got {args.max_frames}")
    if args.cameras is not None and not [c for c in args.cameras.split(",") if c]:
        problems.append("--cameras: expected camera ids separated by commas")
    if args.processes is not None and args.processes < 1:
        problems.append(f"--processes: must be >= 1, got {args.processes}")
    if args.processes and args.cluster:
        problems.append("--processes: spreads the cameras over this machine; --cluster over a Ray cluster: give one")
    if not args.cluster and (args.hosts is not None or args.cpus_per_host != 1):
        problems.append("--hosts, --cpus-per-host: for --cluster only (--processes N sets this machine's hosts)")
    if args.host_timeout is not None and args.host_timeout <= 0:
        problems.append(f"--host-timeout: must be > 0 seconds, got {args.host_timeout:g}")
    return problems


def cmd_run(args: argparse.Namespace) -> int:
    """Check everything, hold the output folder, build the graph (one process, or hosts on
    a Ray cluster) and run it in the one run loop."""
    from pipeline.config.secrets import register_config
    from pipeline.errors import PipelineError
    from pipeline.preflight import check
    from pipeline.runloop import OutputLock, RunOptions, run

    problems = _run_problems(args)
    if problems:
        return _problems(problems)
    cameras = [c for c in args.cameras.split(",") if c] if args.cameras is not None else None
    try:
        if args.cluster or _processes(args) > 1:
            from pipeline.cluster.checks import check_for_cluster

            checked = check_for_cluster(args.config, args.output, args.report, cameras, processes=not args.cluster)
        else:
            checked = check(args.config, args.output, args.report, cameras, for_run=True)
        register_config(checked.config)
        if checked.problems:
            return _problems(checked.problems)
        config = checked.config
        hosts = bool(args.cluster) or _processes(args) > 1
        if hosts and config.metrics.prometheus_port is not None:
            logging.getLogger("pipeline").warning(
                "metrics.prometheus_port: not served by a run of hosts (--cluster, --processes): a moved camera's "
                "counters would go backwards; the summary and --report hold them")
        options = RunOptions(report=config.metrics.report, progress=sys.stderr.isatty() and not args.quiet,
                             log_interval_s=config.metrics.log_interval_s,
                             prometheus_port=None if hosts else config.metrics.prometheus_port)
        with OutputLock(config.outputs.dir):
            runner = _runner(args, config, checked)
            if not hosts:
                options.reload = _reloader(args, runner, cameras)
            return run(runner, options)
    except PipelineError as e:
        return _failed(e)


def _reloader(args: argparse.Namespace, pipeline, cameras: list[str] | None):
    """What SIGHUP and `POST /api/reload` call: the config file read again as this run read it."""
    from pipeline.preflight import read_for_run
    from pipeline.reload import Reloader

    reloader = Reloader(lambda: read_for_run(args.config, args.output, args.report, cameras), pipeline)
    reloader.offer_over_http()
    return reloader


def _processes(args: argparse.Namespace) -> int:
    return args.processes or 1


def _runner(args: argparse.Namespace, config, checked):
    """The graph to run: a `Pipeline` here, a `ProcessRun` of host processes of this
    machine, or a `ClusterRun` of hosts on Ray."""
    if _processes(args) > 1:
        from pipeline.cluster.process_run import ProcessRun

        return ProcessRun(config, args.processes, args.max_frames, args.host_timeout or 5.0)
    if args.cluster:
        from pipeline.cluster.ray_run import ClusterOptions, ClusterRun

        return ClusterRun(config, ClusterOptions(args.cluster, args.hosts, args.cpus_per_host, args.max_frames,
                                                 args.host_timeout or 5.0))
    from pipeline.graph import Pipeline

    return Pipeline(config, max_frames=args.max_frames, models=checked.models)


def _status_url(args: argparse.Namespace):
    """Where the run's web server is (a `status_view.Address`) and its token: `--url` (and
    `--token`), or `--config`'s `outputs.web`; ValueError with one line."""
    from pipeline import status_view

    if args.url:
        address = status_view.parse_url(args.url)
        if address.basic is not None and args.token:
            raise ValueError("--url: holds credentials and a token is given too (--token or $PIPELINE_TOKEN): "
                             "give one of them")
        return address, args.token
    from pathlib import Path

    from pipeline.config import ConfigError, load_yaml, read_config

    try:
        config, _ = read_config(load_yaml(args.config), Path(args.config).resolve().parent)
    except ConfigError as e:
        raise ValueError(e.problems[0]) from None
    web = config.outputs.web
    if web is None or not web.port:
        raise ValueError(f"{args.config}: outputs.web.port is not set: the run serves no status (give --url)")
    return status_view.Address(status_view.url_of_web(web.host, web.port)), args.token or web.token


def cmd_status(args: argparse.Namespace) -> int:
    """A running pipeline's cameras, from its web API: exit 0, 1 when nothing usable answers."""
    from pipeline import status_view

    if bool(args.url) == bool(args.config):
        return _problems(["status: give --url http://HOST:PORT or --config (the run's config, for outputs.web)"])
    if args.timeout <= 0:
        return _problems([f"--timeout: must be > 0 seconds, got {args.timeout:g}"])
    try:
        address, token = _status_url(args)
    except ValueError as e:
        return _problems([str(e)])
    try:
        answer = status_view.fetch(address.url, token, args.timeout, address.basic)
        status = status_view.read_status(address.url, answer)
    except status_view.StatusError as e:
        return _problems([str(e)], FAILED)
    print(json.dumps(status.to_dict(), indent=2) if args.json else status_view.render(status))
    return DONE


def cmd_export(args: argparse.Namespace) -> int:
    """A camera's recordings over a time range as one MP4, packets copied: exit 0, 1 when
    nothing was recorded there, 2 for a mistake (`recording.export`)."""
    from pathlib import Path

    from pipeline.config import ConfigError, load_yaml, read_config
    from pipeline.recording.export import ExportError, export, recorded, when
    from pipeline.recording.segments import stamp
    from pipeline.store.filters import BadParameter, parse_time

    try:
        config, problems = read_config(load_yaml(args.config), Path(args.config).resolve().parent)
        start, end = parse_time("--start", args.start), parse_time("--end", args.end)
    except (ConfigError, BadParameter) as e:
        return _problems(getattr(e, "problems", None) or [str(e)])
    if [p for p in problems if p.startswith("outputs")]:
        return _problems([p for p in problems if p.startswith("outputs")])
    out = config.outputs
    names = [out.record.filename] + [out.record_for(s.record).filename for s in config.sources if s.id == args.camera]
    pieces = recorded(out, names, args.camera)
    if not pieces and args.camera not in [s.id for s in config.sources]:
        return _problems([f"--camera: no camera {args.camera!r} in {args.config}, nor recordings of one"])
    path = args.output or f"{args.camera}.{stamp(start)}-{stamp(end)}.mp4"
    try:
        made = export(args.camera, pieces, start, end, path, out.record.export_max_s)
    except ExportError as e:
        return _failed(e)
    print(f"{path}: {made.video} video and {made.audio} audio packets from {when(made.first)} to {when(made.last)}")
    for note in made.notes:
        print(f"note: {note}")
    return DONE


def cmd_cluster(args: argparse.Namespace) -> int:
    import yaml

    from pipeline.cluster.ray_run import cluster_command
    from pipeline.errors import PipelineError

    if args.action == "add":
        if not args.source:
            return _problems(["--source: required for add, e.g. '{id: door, uri: rtsp://10.0.0.7/stream1}'"])
        try:
            args.source = yaml.safe_load(args.source)
        except yaml.YAMLError as e:
            return _problems([f"--source: invalid YAML: {' '.join(str(e).split())}"])
        if not isinstance(args.source, dict) or not args.source.get("id"):
            return _problems(["--source: expected a mapping with id and uri, e.g. '{id: door, uri: rtsp://...}'"])
    elif args.action == "remove" and not args.camera:
        return _problems(["remove: which camera? pipeline cluster remove CAMERA"])
    try:
        return cluster_command(args)
    except PipelineError as e:  # no Ray cluster to reach
        return _failed(e)


def cmd_models(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pipeline import catalog

    if args.action in ("inspect", "optimize"):
        from pipeline.modelfile import commands

        return commands.inspect_command(args) if args.action == "inspect" else commands.optimize_command(args)
    dest = Path(args.dest) if args.dest else catalog.MODELS_DIR
    if args.action == "list":
        for e in catalog.MODELS:
            present = (dest / e.file).is_file()
            variants = [v.name for v in catalog.VARIANTS if v.derived_from == e.name]
            print(f"{e.name:<22}{'present' if present else 'missing':<9}{e.file:<28}{e.about}")
            built = f"; variants built by fetch: {', '.join(variants)}" if variants else ""
            print(f"{'':<22}source: {e.source}{built}")
        return 0
    from pipeline.modelfile import variants

    fetcher = catalog.Fetcher(dest=dest, build_variant=variants.build)
    if args.no_mirror:
        fetcher.mirrors = []
    fetcher.mirrors = [Path(m) for m in args.mirror or []] + fetcher.mirrors
    if args.url_base:
        fetcher.url_base = args.url_base
    names, samples = args.names or None, not args.no_samples and not args.names
    if args.config:
        try:
            needs = catalog.needs_of_config(Path(args.config))
        except catalog.FetchError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        names, samples = (names or []) + needs.models, [] if args.no_samples else needs.samples
    problems = catalog.fetch_all(names, samples=samples, fetcher=fetcher,
                                 sample_mirrors=[] if args.no_mirror else None)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 1 if problems else 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.tracking:
        from pipeline.bench.tracking import main as tracking_main

        return tracking_main(args)
    if not args.config:
        print("error: bench: --config is required (or --tracking)", file=sys.stderr)
        return BAD_INPUT
    from pipeline.bench.runner import main as bench_main

    return bench_main(args)


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="run the graph of a config")
    run.add_argument("--config", required=True)
    run.add_argument("--output", help="output folder (default: outputs.dir of the config)")
    run.add_argument("--max-frames", type=int, help="stop each camera after N frames")
    run.add_argument("--cameras", help="comma-separated camera ids to run (default: all)")
    run.add_argument("--report", help="write the metrics report as JSON here")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    run.add_argument("--processes", type=int, metavar="N",
                     help="spread the cameras over N processes of this machine (many cheap cameras on several cores)")
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="run the cameras on a Ray cluster: local, auto, or a Ray address (pip install '.[cluster]')")
    run.add_argument("--hosts", type=int, help="with --cluster: pipeline hosts to start (default: one per GPU, "
                                               "else one per --cpus-per-host CPUs)")
    run.add_argument("--cpus-per-host", type=int, default=1, help="with --cluster: CPUs each host takes")
    run.add_argument("--host-timeout", type=float, metavar="SECONDS",
                     help="with --cluster or --processes: a host silent this long is lost: killed, its cameras "
                          "moved (default 5)")
    run.set_defaults(func=cmd_run)


def _add_status(sub) -> None:
    status = sub.add_parser("status", help="the cameras of a running pipeline, from its web port (outputs.web)")
    status.add_argument("--url", help="the run's web server, e.g. http://127.0.0.1:8080")
    status.add_argument("--config", help="or the run's config: its outputs.web host, port and token")
    status.add_argument("--token", default=os.environ.get("PIPELINE_TOKEN"),
                        help="the web token (default: $PIPELINE_TOKEN, else outputs.web.token of --config)")
    status.add_argument("--json", action="store_true", help="the same figures as JSON, for scripts")
    status.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="wait this long for an answer")
    status.set_defaults(func=cmd_status)


def _add_export(sub) -> None:
    export = sub.add_parser("export", help="a camera's recordings over a time range as one MP4, packets copied")
    export.add_argument("--config", required=True, help="the config that recorded (its outputs.dir and record)")
    export.add_argument("--camera", required=True)
    export.add_argument("--start", required=True, help="ISO 8601 (UTC where no zone is given) or epoch seconds")
    export.add_argument("--end", required=True, help="as --start; at most outputs.record.export_max_s after it")
    export.add_argument("-o", "--output", help="the MP4 to write (default: CAMERA.START-END.mp4 here)")
    export.set_defaults(func=cmd_export)


def _add_cluster(sub) -> None:
    cluster = sub.add_parser("cluster", help="add, remove or show cameras of a running `run --cluster`")
    cluster.add_argument("action", choices=["add", "remove", "status"])
    cluster.add_argument("camera", nargs="?", help="remove: the camera id")
    cluster.add_argument("--address", default="auto", help="the Ray cluster (default: auto)")
    cluster.add_argument("--source", help="add: the camera as YAML, like a sources[] entry, e.g. "
                                          "'{id: door, uri: rtsp://...}' (checked by the running driver)")
    cluster.set_defaults(func=cmd_cluster)


class Renamed(argparse.Action):
    """An option that was renamed: it is refused with the name to use now."""

    def __init__(self, option_strings, dest, now: str, **kwargs):
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.now = now

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was renamed: use {self.now}")


def _add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="sync baseline vs pipeline vs the machine's limit; --tracking: tracker "
                                         "quality against peers")
    bench.add_argument("--config", help="the config to bench (not with --tracking)")
    bench.add_argument("--camera-count", type=int, default=4, help="cameras: the config's sources repeated to N")
    bench.add_argument("--cameras", action=Renamed, now="--camera-count N")
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
    bench.add_argument("--tracking", action="store_true",
                       help="the tracker and installed peers on noisy MOTChallenge ground truth (py-motmetrics)")
    bench.add_argument("--seeds", type=int, default=5, help="with --tracking: noise seeds 1..N")
    bench.add_argument("--levels", nargs="+", default=["clean", "typical", "hard"], help="with --tracking: noise levels")
    bench.add_argument("--detect-every", nargs="+", type=int, default=[1], metavar="K",
                       help="with --tracking: also this project's tracker with detections on 1 frame in K (as behind "
                            "detect.fps or motion), tracks predicted between, every frame scored")
    bench.add_argument("--gt", nargs="+", metavar="PATH",
                       help="with --tracking: MOTChallenge gt.txt files (default: TUD-Campus and TUD-Stadtmitte from "
                            "py-motmetrics)")
    bench.add_argument("--density", metavar="CLIP",
                       help="only: the most paced live cameras of CLIP held, as configured and with default outputs; "
                            "CLIP: a file or a made clip (1080p, 1080p-bframes, 360p, 1080p-idle, 360p-idle); levels "
                            "of --live-seconds")
    bench.add_argument("--detect-clip", metavar="CLIP",
                       help="with --density: every camera analyses CLIP as its sub-stream (`detect_uri`) and records "
                            "the --density clip (a file or a made clip, e.g. 360p-idle beside 1080p-idle)")
    bench.add_argument("--fps", type=int, help="with --density: the made clip's frame rate (default 15)")
    bench.add_argument("--runs", type=int, default=1, help="with --density: rounds, each figure their median")
    bench.add_argument("--processes", type=int, metavar="N",
                       help="with --density: the cameras spread over N processes (as `run --processes N`)")
    bench.add_argument("--watched", type=int, default=0, metavar="K",
                       help="with --density: the live page served and the video of K cameras read from another "
                            "process through each level (as K tiles of an open page)")
    bench.add_argument("--scenario", choices=("both", "spread", "in-step"), default="both",
                       help="with --density: the cameras' clips started at spread points (their activity not at once), "
                            "in step (everyone's active stretch at once: the worst case), or both (default)")
    bench.set_defaults(func=cmd_bench)


def _output_lock(folder: str):
    from pipeline.runloop import OutputLock

    return OutputLock(folder)


def _add_query(sub) -> None:
    from pipeline.store.query_command import add_query_parser

    add_query_parser(sub)


def build_parser() -> argparse.ArgumentParser:
    from pipeline.store.store_command import add_store_parser

    parser = argparse.ArgumentParser(prog="pipeline", description="Multi-camera video analytics on ONNX Runtime")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_status(sub)
    _add_cluster(sub)
    _add_export(sub)
    val = sub.add_parser("validate", help="check a config without running it")
    val.add_argument("--config", required=True)
    val.set_defaults(func=cmd_validate)
    models = sub.add_parser("models", help="list, fetch, inspect or optimize models")
    models.set_defaults(func=cmd_models)
    actions = models.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the catalogued models and their sources")
    listing.add_argument("--dest", help="models folder (default: models/ of the project)")
    fetch = actions.add_parser("fetch", help="fetch catalogued models (and variants such as yolox_nano.int8) and clips")
    fetch.add_argument("names", nargs="*", help="catalogued models to fetch (default: all, and the sample clips)")
    fetch.add_argument("--config", help="fetch only the catalogued models and sample clips this config names")
    fetch.add_argument("--no-samples", action="store_true", help="fetch models only")
    fetch.add_argument("--dest", help="models folder (default: models/ of the project)")
    fetch.add_argument("--mirror", action="append", help="a folder holding catalogued files (first choice)")
    fetch.add_argument("--no-mirror", action="store_true",
                       help="ignore $PIPELINE_MODEL_MIRROR, $PIPELINE_SAMPLE_MIRROR and ../shared")
    fetch.add_argument("--url-base", help="fetch public files from here instead of their hosts (a local mirror)")
    inspect = actions.add_parser("inspect", help="what an ONNX file says: inputs, outputs, metadata, layout, a "
                                                 "model block for the config")
    inspect.add_argument("path", help="the ONNX file")
    inspect.add_argument("--picture", help="an image or video whose first frame checks the layout (default: the "
                                           "sample clip vtest.mp4, else a test card)")
    optimize = actions.add_parser("optimize", help="an fp16 or int8 variant, written only if it agrees")
    optimize.add_argument("path", help="the ONNX file")
    precision = optimize.add_mutually_exclusive_group(required=True)
    precision.add_argument("--fp16", action="store_true", help="float16 weights and compute (GPUs); fp32 in and out")
    precision.add_argument("--int8", action="store_true", help="static QDQ int8, per-channel (CPUs)")
    optimize.add_argument("--calibrate", nargs="+", required=True, metavar="CLIP",
                          help="clips sampled evenly: every other frame calibrates int8, the rest measure agreement")
    optimize.add_argument("--out", help="the variant's file (default: PATH with .fp16.onnx or .int8.onnx)")
    optimize.add_argument("--min-agreement", type=float, default=0.95,
                          help="write nothing below this (detectors: F1 at IoU 0.5, same class; classifiers: top-1)")
    optimize.add_argument("--frames", type=int, default=128, help="frames sampled across the clips")
    optimize.add_argument("--threads", type=int, help="intra-op threads when timing (default: every core)")
    optimize.add_argument("--config", help="take the model's settings from this config (default: from the file)")
    optimize.add_argument("--model", help="with --config: the model's name under `models`")
    _add_bench(sub)
    _add_query(sub)
    add_store_parser(sub, _output_lock)
    return parser


def main(argv: list[str] | None = None) -> int:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _quit_on_signal)
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    if args.command == "run":  # the run loop takes these over once the cameras start
        signal.signal(signal.SIGTERM, functools.partial(_quit_on_signal, status=DONE))  # a service manager's stop
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a reload while starting: the config was just read
    if args.command in ("models", "bench", "status", "export", "query"):  # nothing to finalise: clean up and stop
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stdout, sys.stdout = sys.stdout, Output(sys.stdout)
    try:
        status = args.func(args)
        sys.stdout.flush()  # here, where a reader gone or a full disk is caught, not at exit
        return status
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return INTERRUPTED
    except StdoutGone:
        return _stdout_gone(FAILED if args.command == "run" else DONE)
    except OutputError as e:
        print(f"error: {e}", file=sys.stderr)
        return _stdout_gone(FAILED)
    finally:
        sys.stdout = stdout


class OutputError(Exception):
    """Writing a command's output to stdout failed (a full disk, a terminal gone): one line."""


class StdoutGone(BrokenPipeError):
    """stdout's reader left (`pipeline query ... | head`); a broken pipe elsewhere (a
    socket, a subprocess) is the command's own failure, never taken for this."""


class Output:
    """stdout as a command writes to it, its errors told from the command's own: a reader
    gone is `StdoutGone`, any other is `OutputError`. The rest is stdout's."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self._guarded(self.stream.write, text)

    def flush(self) -> None:
        self._guarded(self.stream.flush)

    @staticmethod
    def _guarded(call, *args):
        try:
            return call(*args)
        except BrokenPipeError as e:
            raise StdoutGone(*e.args) from None
        except OSError as e:
            raise OutputError(f"cannot write to stdout: {e.strerror or e}") from None

    def __getattr__(self, name: str):
        return getattr(self.__dict__["stream"], name)


def _stdout_gone(status: int) -> int:
    """Stop quietly, as Python's documentation advises where stdout cannot take more (its
    reader left: `pipeline query ... | head`; or a full disk): stdout pointed at devnull,
    so that the interpreter's last flush at exit does not fail again with a traceback.

    A reader that leaves early is no failure of the command (exit 0): a short answer is
    whole in the pipe's buffer before the reader leaves, and the status cannot depend on
    the answer's length (a table or its longer JSON). A run's summary comes before its
    report and exit status, so a run still ends 1 there."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return status


if __name__ == "__main__":
    sys.exit(main())
