"""Everything checked before a camera starts, reported in one round with YAML paths.

- the config itself (types, options, stage specs, analytics geometry, output names);
- every model: it loads, its input fits `input_size`, a real picture (the first file
  camera's first frame, or a built-in test card) runs through it and its decoder, the
  boxes look like boxes (a layout read the wrong way round gives nonsense, not an
  error), and its class count matches its labels;
- the outputs: the folder can be created and written, the encoder opens with its
  options, every path is unique and never an input (checked with the config);
- `validate` also reads one frame of every file camera and checks the metrics port.

`run` and `validate` both go through here, so `validate` says exactly what `run` would
refuse; the sessions opened for the checks are handed to the pipeline, not reopened.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

import av
import cv2
import numpy as np
import onnxruntime as ort

from pipeline.config import (Config, ConfigError, ModelConfig, cameras_problem, is_url, load_yaml, output_path_problems,
                             read_config)
from pipeline.decoders.layouts import DetectionDecoder, LayoutError
from pipeline.engines.binding import no_graph
from pipeline.engines.plan import session_threads
from pipeline.engines.session import ModelError, create_session, output_names
from pipeline.errors import one_line
from pipeline.metrics.prometheus import unusable_port
from pipeline.preprocess import Preprocessor
from pipeline.runtime.threads import plan_cores
from pipeline.sinks.video import encoder_problem
from pipeline.sources.connection import probe


@dataclass
class Checked:
    """A config that passed (or not), with the model sessions its checks opened."""

    config: Config
    sessions: dict[str, ort.InferenceSession] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.sessions.clear()


def test_card(width: int = 640, height: int = 480) -> np.ndarray:
    """A synthetic picture with shapes and edges, for models when no file camera gives a real one."""
    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([(x * 255 // width), (y * 255 // height), ((x + y) * 255 // (width + height))], -1).astype(np.uint8)
    cv2.rectangle(img, (width // 8, height // 4), (width // 3, height - height // 8), (40, 40, 200), -1)
    cv2.circle(img, (2 * width // 3, height // 2), height // 5, (220, 220, 220), -1)
    return img


def sample_picture(config: Config) -> np.ndarray:
    """The first frame of the first readable file camera, else the test card."""
    for s in config.sources:
        if s.uri and not is_url(s.uri):
            try:
                with av.open(s.uri) as c:
                    for vf in c.decode(video=0):
                        return vf.to_ndarray(format="bgr24")
            except Exception:
                continue
    return test_card()


def model_problems(model: ModelConfig, session: ort.InferenceSession, picture: np.ndarray) -> list[str]:
    """Run `picture` through the model and its decoder; what does not fit, in one line each."""
    where = f"models.{model.name}"
    try:
        names = output_names(model, session)
    except ModelError as e:
        return [str(e)]
    tensor, _ = Preprocessor(model)(picture)
    batch = tensor.numpy()[None]
    try:
        # the session goes on to the engine: a plain run must not capture CUDA graph 0 on ORT's own buffers
        options = no_graph() if model.engine.cuda_graph else None
        outputs = session.run(names, {session.get_inputs()[0].name: batch}, options)
    except Exception as e:
        return [f"{where}: test inference failed: {one_line(e)}"]
    shapes = [list(o.shape) for o in outputs]
    if model.is_classifier:
        out = outputs[0]
        if out.ndim < 2 or out.shape[0] < 1:
            return [f"{where}: classifier output shape {shapes[0]} is not [batch, classes]"]
        classes = int(np.prod(out.shape[1:]))
        if model.labels and classes != len(model.labels):
            return [f"{where}.labels: the model has {classes} classes but labels lists {len(model.labels)}"]
        return []
    decoder = DetectionDecoder(model)
    try:
        decoder.decode(outputs, 1)
    except LayoutError as e:
        return [f"{where}: output {shapes} does not fit layout {model.layout}: {e}"]
    except Exception as e:
        return [f"{where}: output {shapes} cannot be decoded as layout {model.layout}: {e}"]
    why = decoder.implausible(outputs)
    return [f"{where}.layout: {why}"] if why else []


def open_models(config: Config, picture: np.ndarray | None = None) -> tuple[dict[str, ort.InferenceSession], list[str]]:
    """A session per model the graph uses, each checked on a real picture."""
    cores = plan_cores(config)
    sessions: dict[str, ort.InferenceSession] = {}
    problems: list[str] = []
    for name in config.used_models():
        model = config.models.get(name)
        if model is None or not model.path or model.layout is None or model.input_size is None:
            continue  # its config problems are reported already
        try:
            session = create_session(model, session_threads(model, cores), model.engine.inter_op_threads)
        except ModelError as e:
            problems.append(str(e))
            continue
        if picture is None:
            picture = sample_picture(config)
        found = model_problems(model, session, picture)
        problems += found
        if not found:
            sessions[name] = session
            line = model.from_file_line()
            if line:
                import logging

                logging.getLogger("pipeline.preflight").info("%s", line)
    return sessions, problems


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


def cluster_problems(config: Config) -> tuple[Config, list[str]]:
    """What `--cluster` needs: a JSON lines file per camera and fragmented video (a host
    that dies leaves playable files, and its cameras resume from them elsewhere)."""
    problems = []
    out = config.outputs
    if out.jsonl.enabled and "{camera}" not in out.jsonl.filename:
        problems.append("outputs.jsonl.filename: --cluster needs one file per camera: put {camera} in the name")
    if not out.jsonl.enabled:
        problems.append("outputs.jsonl.enabled: --cluster needs the JSON lines (they mark where a camera resumes)")
    if out.video.fragmented is False:
        problems.append("outputs.video.fragmented: --cluster needs fragmented video (playable after a host dies)")
    video = replace(out.video, fragmented=True)
    return replace(config, outputs=replace(out, video=video)), problems


def check(config_path: str, output_dir: str | None = None, report: str | None = None, cameras: list[str] | None = None,
          for_run: bool = True, cluster: bool = False) -> Checked:
    """Read the config at `config_path` with the command line's overrides and check
    everything; for a run the output folders are created, for `validate` nothing is written."""
    data = load_yaml(config_path)
    config, problems = read_config(data, Path(config_path).resolve().parent)
    if cameras:
        try:
            config = config.subset(cameras)
        except ConfigError as e:
            problems += e.problems
    if output_dir:
        config = config.with_output_dir(output_dir)
    if report:
        config = config.with_report(report)
    if cluster:
        config, found = cluster_problems(config)
        problems += found
    elif too_many := cameras_problem(config.sources, config.outputs):
        problems.append(f"sources: {too_many}")
    checked = Checked(config)
    checked.sessions, found = open_models(config)
    problems += found
    problems += output_problems(config, create=for_run and not problems)
    if not for_run:
        problems += [f"sources[{i}].uri: {msg}" for i, s in enumerate(config.sources)
                     if s.uri and not s.live and (msg := probe(s.uri))]
    problems += port_problems(config)
    checked.problems = list(dict.fromkeys(problems))
    return checked
