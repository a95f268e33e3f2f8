"""Shared fixtures: the real models and clips, short clips cut from them, config files."""
from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT / "tests" / "support"))


def _find(kind: str, name: str) -> Path:
    """A model or clip the tests run on (from `models/` and `samples/`, or `../shared/`, or
    the folders in $PIPELINE_TEST_ASSETS). Missing: a skip on a developer's machine, a
    failure in CI (`CI=true`), where a green run must mean the tests really ran."""
    bases = [Path(p) / kind for p in os.environ["PIPELINE_TEST_ASSETS"].split(os.pathsep)] \
        if "PIPELINE_TEST_ASSETS" in os.environ else [ROOT / kind, SHARED / kind]
    for base in bases:
        if (base / name).is_file():
            return base / name
    missing(f"{kind}/{name} is not available: run `pipeline models fetch` (make fetch) first")


def pytest_collection_modifyitems(items: list) -> None:
    """`make test` runs the cluster tests from tests/cluster only (its workers collect no
    other folder) and every other test with `not cluster`: one elsewhere would never run."""
    stray = [i.nodeid for i in items if i.get_closest_marker("cluster") and not i.nodeid.startswith("tests/cluster/")]
    if stray:
        raise pytest.UsageError(f"tests marked cluster belong in tests/cluster: {', '.join(stray)}")


def missing(message: str) -> None:
    """What a test needs is not here: a skip on a developer's machine, a failure in CI."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(size)`: a folder on a tmpfs of `size` (e.g. "2m") of its own, a disk that
    fills up for real (ENOSPC); unmounted at the end. Mounting needs root (CI runs as root)."""
    mounted = []

    def mount(size: str, name: str = "disk") -> Path:
        folder = tmp_path / name
        folder.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                           capture_output=True, text=True)
        if r.returncode:
            missing(f"a small disk needs `mount -t tmpfs` (root): {r.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):  # one mounted inside another goes first
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.fixture
def serve():
    """`serve(folder)`: the folder over HTTP on 127.0.0.1 (a public host stood in for);
    returns its base URL. `serve.requests` lists the paths asked for."""
    import functools
    import http.server
    import threading

    servers = []
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            requests.append(self.path)

    def start(folder: Path) -> str:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_port}"

    start.requests = requests  # type: ignore[attr-defined]
    yield start
    for s in servers:
        s.shutdown()


@pytest.fixture(scope="session")
def model_path():
    return lambda name: str(_find("models", name))


@pytest.fixture(scope="session")
def sample_path():
    return lambda name: str(_find("samples", name))


@pytest.fixture(scope="session")
def coco_labels() -> list[str]:
    return [l.strip() for l in (ROOT / "models" / "coco_classes.txt").read_text().splitlines() if l.strip()]


def cut_clip(src: str, dst: str, frames: int) -> str:
    """Re-encode the first `frames` frames of a clip (keeps the size, frame rate and timing)."""
    with av.open(src) as inp, av.open(dst, "w") as out:
        s_in = inp.streams.video[0]
        s_out = out.add_stream("libx264", rate=s_in.average_rate or Fraction(25))
        s_out.width, s_out.height, s_out.pix_fmt = s_in.width, s_in.height, "yuv420p"
        s_out.options = {"preset": "ultrafast", "crf": "18"}
        for i, frame in enumerate(inp.decode(s_in)):
            if i >= frames:
                break
            frame.pts = i
            frame.time_base = Fraction(1) / (s_in.average_rate or Fraction(25))
            for p in s_out.encode(frame.reformat(format="yuv420p")):
                out.mux(p)
        for p in s_out.encode(None):
            out.mux(p)
    return dst


@pytest.fixture(scope="session")
def short_clips(tmp_path_factory, sample_path) -> dict[str, str]:
    """40-frame versions of the sample clips, made once per test session."""
    d = tmp_path_factory.mktemp("clips")
    return {name: cut_clip(sample_path(f"{name}.mp4"), str(d / f"{name}.mp4"), 40) for name in ("vtest", "bikes")}


def detector_model(model_path, layout: str = "yolox", **extra) -> dict:
    """YOLOX-nano as the sample configs use it (another file and layout: `path`, `layout`)."""
    file = {"yolov8": "yolox_nano_v8layout.onnx"}.get(layout, "yolox_nano.onnx")
    m = {"path": model_path(file), "layout": layout, "input_size": 416, "color": "bgr", "letterbox": "top_left",
         "labels": str(ROOT / "models" / "coco_classes.txt"), "score_threshold": 0.3, "nms_iou": 0.45,
         "batching": {"max_batch": 4, "max_wait_ms": 10}, "engine": {"max_inflight": 2}}
    m.update(extra)
    return m


def classifier_model(model_path, **extra) -> dict:
    m = {"path": model_path("efficientnet_lite0.onnx"), "layout": "classifier", "input_size": 224, "color": "rgb",
         "mean": 127, "std": 128, "letterbox": "stretch", "labels": str(ROOT / "models" / "imagenet_labels.json"),
         "batching": {"max_batch": 8, "max_wait_ms": 5}, "engine": {"max_inflight": 2}}
    m.update(extra)
    return m


@pytest.fixture
def write_config(tmp_path):
    """Write a config dict as YAML in a fresh folder and return its path."""

    def write(data: dict, name: str = "config.yaml") -> str:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return str(path)

    return write


@pytest.fixture
def fifo(tmp_path):
    """`fifo(path=None)` makes a FIFO nobody writes to (a reader's open of it waits for a
    writer) and returns its path; after the test a writer comes and goes at each, which
    releases a reader still stuck in its open."""
    made: list[Path] = []

    def make(path: str | Path | None = None) -> str:
        path = Path(path or tmp_path / f"fifo{len(made)}.mp4")
        os.mkfifo(path)
        made.append(path)
        return str(path)

    yield make
    for path in made:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader waits at it (ENXIO), or it is gone
            pass


@pytest.fixture(scope="session")
def pipeline_cmd() -> list[str]:
    return [sys.executable, "-m", "pipeline"]


def read_jsonl(path: str) -> list[dict]:
    import json

    with open(path) as f:
        return [json.loads(line) for line in f]


def label(detection: dict, classifier: str = "cls") -> str | None:
    """The label a classifier stage gave a detection in the JSON lines (None: none)."""
    return detection.get("labels", {}).get(classifier, {}).get("label")


def video_frames(path: str) -> list[np.ndarray]:
    with av.open(path) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


def frame_count(path: str) -> int:
    with av.open(path) as c:
        return sum(1 for _ in c.decode(video=0))



os.environ.setdefault("PYTHONPATH", str(ROOT))


def run_pipeline(config: dict, write_config, output_dir: str, max_frames: int | None = None):
    """Run a config in-process to the end and return the final metrics snapshot."""
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    config.setdefault("outputs", {})["dir"] = output_dir
    p = Pipeline(load_config(write_config(config)), max_frames=max_frames)
    p.start()
    try:
        assert p.wait(300), "pipeline did not finish"
    finally:
        p.close()
    return p.snapshot()


def still_clip(image_bgr: np.ndarray, path: str, frames: int = 3, fps: int = 5) -> str:
    """A short H.264 clip of one still picture."""
    from synthetic import Mover, render

    h, w = image_bgr.shape[:2]
    image_bgr = image_bgr[: h - h % 2, : w - w % 2]
    render([Mover(image_bgr, (0, 0), (0, 0))], path, frames, (image_bgr.shape[1], image_bgr.shape[0]), fps)
    return path



def color_model(model_path, **extra) -> dict:
    """The catalog's colour classifier (built by `pipeline models fetch`, no download)."""
    m = {"path": model_path("vehicle_color.onnx"), "layout": "classifier", "input_size": 32, "color": "rgb",
         "scale": 1 / 255, "labels": str(ROOT / "models" / "vehicle_colors.txt"), "engine": {"max_inflight": 2}}
    m.update(extra)
    return m


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server on 127.0.0.1 for the session (`postgres_server`); where the
    package is not installed, a skip on a developer's machine and a failure in CI."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing("the PostgreSQL tests need psycopg (pip install -e '.[test]')")
    from postgres_server import PostgresServer, binaries

    bin_dir = binaries()
    if bin_dir is None:
        missing("PostgreSQL's server is not installed (Debian's postgresql package: apt-get install postgresql)")
    server = PostgresServer(bin_dir).start()
    yield server
    server.remove()


_databases = iter(range(1_000_000))


@pytest.fixture
def postgres_url(postgres) -> str:
    """An empty database of the session's PostgreSQL server, for one test."""
    return postgres.new_database(f"test_{next(_databases)}")
