"""`reshape`: a detector whose file fixes a square input run at its camera's shape instead."""
from dataclasses import replace

import av
import pytest

from pipeline.config import ModelConfig
from pipeline.engines.model_check import model_problems
from pipeline.engines.session import ModelError, create_session
from pipeline.modelfile.agreement import Runner, detector_f1
from pipeline.preprocess import Preprocessor


@pytest.fixture(scope="module")
def square(model_path) -> ModelConfig:
    return ModelConfig(name="det", path=model_path("yolox_nano.onnx"), layout="yolox", input_size=(416, 416))


def test_a_detector_run_at_a_wide_cameras_shape_finds_what_the_square_input_finds(square, sample_path):
    """bikes.mp4 is 640x272: letterboxed top-left into 416x416 it fills 416x177, the rest
    is padding; at 416x256 the picture is scaled the same, so the boxes (input pixels) are
    the same boxes but where the padding the detector sees around the picture changes them
    (F1 0.97 measured; 0.98 on a 16:9 clip), on every 10th frame of the clip."""
    wide = replace(square, input_size=(416, 256), reshape=True)
    runners = [(Runner(m, create_session(m, 1)), Preprocessor(m)) for m in (square, wide)]
    answers: list[list] = [[], []]
    with av.open(sample_path("bikes.mp4")) as c:
        for i, vf in enumerate(c.decode(video=0)):
            if i % 10 == 0:
                picture = vf.to_ndarray(format="bgr24")
                for (runner, pre), found in zip(runners, answers):
                    found += runner.answers([pre(picture)[0].numpy()])
    assert runners[1][0].session.get_inputs()[0].shape[2:] == [256, 416]
    agreed = detector_f1(*answers)
    assert agreed.reference >= 50 and agreed.score >= 0.95, agreed.shows()


def test_a_size_the_graph_cannot_take_is_one_line_naming_the_model(square, sample_path, model_path):
    """Without `reshape` the file's size holds and the line says how to ask for another;
    with it, a graph with its size built in (the v8-layout file's anchors) is refused at
    load, and a size off the detector's stride by its first inference, each in one line."""
    with pytest.raises(ModelError, match=r"models\.det: .*416x416.* input_size is 416x256 \(`reshape: true`"):
        create_session(replace(square, input_size=(416, 256)), 1)
    built_in = replace(square, path=model_path("yolox_nano_v8layout.onnx"), layout="yolov8", input_size=(416, 256),
                       reshape=True)
    with pytest.raises(ModelError, match=r"^models\.det: reshape: the graph of .* does not run at input_size 416x256"):
        create_session(built_in, 1)
    odd = replace(square, input_size=(416, 250), reshape=True)
    with av.open(sample_path("bikes.mp4")) as c:
        picture = next(c.decode(video=0)).to_ndarray(format="bgr24")
    problems = model_problems(odd, create_session(odd, 1), picture)
    assert len(problems) == 1 and problems[0].startswith("models.det: ") and "416x250" in problems[0]
