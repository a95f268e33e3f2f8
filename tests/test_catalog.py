"""`pipeline models fetch` on a machine with no mirror: the catalogued models come from
their public files (served here by a local HTTP server) and are derived locally,
byte-identical; a wrong public file is refused."""
from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ROOT
from pipeline.catalog import MODELS, sha256_of


@pytest.fixture
def serve():
    """Serve a folder on 127.0.0.1; returns its base URL."""
    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        handler.log_message = lambda *a: None  # type: ignore[method-assign]
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_port}"

    yield start
    for s in servers:
        s.shutdown()


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


def test_a_source_that_needs_torch_says_how_to_get_it(tmp_path, serve):
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here: the export itself is exercised instead (slow, by hand)")
    r = fetch(tmp_path / "models", serve(tmp_path), "efficientnet_lite0")
    assert r.returncode == 1
    assert "needs torch: pip install torch" in r.stderr


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
