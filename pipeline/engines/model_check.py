"""The one way a run opens a model: its session (and the second, wide one where the plan
has it), checked on a real picture through its decoder, then handed to its engine.

The start-up checks (`preflight`) open the models this way and pass them to the
`Pipeline`; a `Pipeline` built without them (library use, a cluster host) opens what is
missing the same way, so every run's models are checked exactly once. A layout read the
wrong way round gives nonsense, not an error: the boxes are checked for looking like
boxes, and the class count against the labels.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import av
import cv2
import numpy as np
import onnxruntime as ort

from pipeline.config import Config, ModelConfig, is_url
from pipeline.decoders.layouts import DetectionDecoder, LayoutError
from pipeline.engines.binding import no_graph
from pipeline.engines.plan import plan_cores, session_threads, wide_threads
from pipeline.engines.session import GPU_PROVIDERS, ModelError, create_session, output_names
from pipeline.errors import one_line
from pipeline.preprocess import Preprocessor

log = logging.getLogger("pipeline.preflight")


@dataclass
class OpenModel:
    """A model's sessions, opened for a run: `session` for its workers, `wide` for a lone
    batch while nothing else runs (`engine.idle_intra_op_threads`; None without)."""

    session: ort.InferenceSession
    wide: ort.InferenceSession | None = None

    @property
    def on_gpu(self) -> bool:
        """Whether the session really got a GPU provider (only the session tells)."""
        return self.session.get_providers()[0] in GPU_PROVIDERS


def open_model(model: ModelConfig, cores: int) -> OpenModel:
    """The model's sessions, sized by the thread plan: the only place a run creates one."""
    def session(threads: int, spinning: bool) -> ort.InferenceSession:
        return create_session(model, threads, model.engine.inter_op_threads, spinning=spinning)

    opened = OpenModel(session(session_threads(model, cores), spinning=False))
    wide = wide_threads(model, cores, opened.on_gpu)
    if wide:
        opened.wide = session(wide, spinning=True)
    return opened


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
        at = f" at input_size {model.input_size[0]}x{model.input_size[1]} (reshape)" if model.reshape else ""
        return [f"{where}: test inference failed{at}: {one_line(e)}"]
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


def open_models(config: Config, given: dict[str, OpenModel] | None = None,
                picture: np.ndarray | None = None) -> tuple[dict[str, OpenModel], list[str]]:
    """Every model the graph uses, opened and checked (those `given` were, by the start-up
    checks); what does not work, one line each."""
    cores = plan_cores(config)
    opened = dict(given or {})
    problems: list[str] = []
    for name in config.used_models():
        model = config.models.get(name)
        if name in opened or model is None or not model.path or model.layout is None or model.input_size is None:
            continue  # its config problems are reported already
        try:
            candidate = open_model(model, cores)
        except ModelError as e:
            problems.append(str(e))
            continue
        if picture is None:
            picture = sample_picture(config)
        found = model_problems(model, candidate.session, picture)
        problems += found
        if not found:
            opened[name] = candidate
            line = model.from_file_line()
            if line:
                log.info("%s", line)
    return opened, problems
