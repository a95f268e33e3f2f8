"""Everything checked before a camera starts, reported in one round with YAML paths.

- the config itself (types, options, stage specs, analytics geometry, output names);
- every model: it loads, its input fits `input_size`, a real picture (the first file
  camera's first frame, or a built-in test card) runs through it and its decoder, the
  boxes look like boxes (a layout read the wrong way round gives nonsense, not an
  error), and its class count matches its labels;
- the outputs: the folder can be created and written and holds no other config's
  output, the encoder opens with its options, every path is unique and never an input
  (checked with the config), the event destinations' host names resolve;
- `validate` also reads one frame of every file camera and checks the metrics port.

`run` and `validate` both go through here, so `validate` says exactly what `run` would
refuse; the models are opened and checked by `engines.model_check` and handed to the
pipeline, not reopened. A `--cluster` driver opens none (`cluster.checks`): its hosts
open and check their own.
"""
from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from pipeline.config import Config, ConfigError, cameras_problem, load_yaml, output_path_problems, read_config
from pipeline.engines.model_check import OpenModel, open_models
from pipeline.metrics.prometheus import unusable_port
from pipeline.sinks.encoder import encoder_problem
from pipeline.sources.connection import probe


OWNER = ".config"  # in the output folder: the real path of the config whose output it holds


@dataclass
class Checked:
    """A config that passed (or not), with the models its checks opened (for the run)."""

    config: Config
    models: dict[str, OpenModel] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def folder_problem(path: str, create: bool) -> str | None:
    """Why `path` cannot serve as the output folder (None when it can); `create` makes it."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            return f"{path} is a file, not a folder"
        if not os.access(p, os.W_OK | os.X_OK):
            return f"{path}: no permission to write there"
        return None
    parent = next((a for a in p.parents if a.exists()), None)
    if parent is None or not parent.is_dir():
        return f"cannot create {path}: {parent} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create {path}: no permission to write in {parent}"
    if create:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return f"cannot create {path}: {e.strerror}"
    return None


def output_problems(config: Config, create: bool) -> list[str]:
    out = config.outputs
    problems = output_path_problems(config)
    why = folder_problem(out.dir, create)
    if why:
        problems.append(f"outputs.dir: {why}")
    if out.video.enabled:
        why = encoder_problem(out.video)
        if why:
            problems.append(f"outputs.video: {why}")
    report = config.metrics.report
    if report:
        if os.path.isdir(report):
            problems.append(f"metrics.report: {report} is a folder; give a file name")
        else:
            why = folder_problem(os.path.dirname(os.path.abspath(report)), create)
            if why:
                problems.append(f"metrics.report: {why}")
    return problems


def owner_problem(folder: str, config_path: str) -> str | None:
    """Why this config may not write into `folder` (None: it may): the folder holds the
    output of another config. Two configs sharing a folder (the default `out` beside them,
    or one `outputs.dir`) would mix or overwrite each other's files without a word."""
    marker = Path(folder) / OWNER
    try:
        holder = marker.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        return f"outputs.dir: cannot read {marker}: {getattr(e, 'strerror', None) or e}"
    if not holder or holder == os.path.realpath(config_path):
        return None
    return (f"outputs.dir: {folder} holds the output of {holder}: give {config_path} its own outputs.dir "
            f"(or --output), or remove {marker} to hand the folder over")


def claim_folder(folder: str, config_path: str) -> None:
    """Mark `folder` as this config's output (see `owner_problem`)."""
    marker = Path(folder) / OWNER
    if not marker.exists():
        marker.write_text(os.path.realpath(config_path) + "\n", encoding="utf-8")


def port_problem(where: str, port: int | None, host: str = "127.0.0.1") -> str | None:
    """Why the server of `where` could not listen on `port` (None when it could). The probe
    binds as the servers do, with SO_REUSEADDR: a port a stopped run left in TIME-WAIT is free."""
    if not port:
        return None
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return unusable_port(where, port, host, e)
    return None


def port_problems(config: Config) -> list[str]:
    """The metrics port and the web port: each free, and not the same one (the second
    server would find it taken by the first)."""
    metrics, web = config.metrics.prometheus_port, config.outputs.web
    if web is not None and metrics and web.port == metrics:
        return [f"outputs.web.port: port {metrics} is also metrics.prometheus_port; give them different ports "
                "(the web port serves /metrics too)"]
    found = [port_problem("metrics.prometheus_port", metrics)]
    if web is not None:
        found.append(port_problem("outputs.web.port", web.port, web.host))
    return [why for why in found if why]


RESOLVE_S = 5.0  # a resolver slower than this is no verdict on the name
NO_ADDRESS = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}  # the name has no address


def unresolved(host: str) -> bool:
    """Whether `host` surely names no address: the resolver said so within `RESOLVE_S` (a
    slow or unreachable resolver proves nothing). A daemon thread: a resolver that never
    answers keeps nothing waiting."""
    verdict: list[bool] = []

    def resolve() -> None:
        try:
            socket.getaddrinfo(host, None)
            verdict.append(False)
        except socket.gaierror as e:
            verdict.append(e.errno in NO_ADDRESS)
        except (OSError, UnicodeError):
            verdict.append(False)

    thread = threading.Thread(target=resolve, name=f"resolve {host}", daemon=True)
    thread.start()
    thread.join(RESOLVE_S)
    return bool(verdict and verdict[0])


def host_problems(config: Config) -> list[str]:
    """The event destinations' hosts must resolve: a name that does not is a typo, found
    before the run rather than as every event lost. A host that resolves but is down is
    fine, as a camera that is down is: events wait for it (up to their buffer)."""
    events = config.outputs.events
    problems = []
    if events.mqtt is not None and events.mqtt.host and unresolved(events.mqtt.host):
        problems.append(f"outputs.events.mqtt.host: {events.mqtt.host} does not resolve to an address (a typo?)")
    host = urlsplit(events.webhook.url).hostname if events.webhook is not None and events.webhook.url else None
    if host and unresolved(host):
        problems.append(f"outputs.events.webhook.url: the host {host} does not resolve to an address (a typo?)")
    return problems


Adjust = Callable[[Config], tuple[Config, list[str]]]  # a run's own demands on the config (`--cluster`)


def read_for_run(config_path: str, output_dir: str | None = None, report: str | None = None,
                 cameras: list[str] | None = None) -> tuple[Config, list[str]]:
    """The config at `config_path` as a run takes it, with the command line's overrides,
    and its problems (a reload reads it again this way); broken YAML raises `ConfigError`."""
    config, problems = read_config(load_yaml(config_path), Path(config_path).resolve().parent)
    if cameras:
        try:
            config = config.subset(cameras)
        except ConfigError as e:
            problems += e.problems
    if output_dir:
        config = config.with_output_dir(output_dir)
    if report:
        config = config.with_report(report)
    return config, problems


def check(config_path: str, output_dir: str | None = None, report: str | None = None, cameras: list[str] | None = None,
          for_run: bool = True, adjust: Adjust | None = None, models: bool = True) -> Checked:
    """Read the config at `config_path` with the command line's overrides and check
    everything; for a run the output folders are created, for `validate` nothing is
    written. `models`: open and check the models here (a cluster's hosts open their own)."""
    config, problems = read_for_run(config_path, output_dir, report, cameras)
    if adjust is not None:
        config, found = adjust(config)
        problems += found
    too_many = None if adjust is not None else cameras_problem(config.sources, config.outputs)  # adjust: its own
    if too_many:
        problems.append(f"sources: {too_many}")
    checked = Checked(config)
    if models:
        checked.models, found = open_models(config)
        problems += found
    if not too_many:  # too many: each camera's own checks (a probe, its file names) would take hours
        problems += output_problems(config, create=for_run and not problems)
        if not for_run:
            problems += [f"sources[{i}].{field}: {msg}" for i, s in enumerate(config.sources)
                         for field, uri in (("uri", s.uri), ("detect_uri", s.detect_uri))
                         if uri and not s.live and (msg := probe(uri, (s.open_timeout_s, s.read_timeout_s)))]
        problems += port_problems(config) + host_problems(config)
        why = owner_problem(config.outputs.dir, config_path)
        if why:
            problems.append(why)
    checked.problems = list(dict.fromkeys(problems))
    if for_run and not checked.problems:
        claim_folder(config.outputs.dir, config_path)
    return checked
