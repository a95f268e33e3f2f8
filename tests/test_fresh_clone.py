"""A user's clone: no ../shared beside it, nothing installed, no mirror. `make run` must
install, fetch what the sample config names from the public sources and run it. The
package registries are real (PyPI for the environment and bikes.mp4, Debian for vtest's
package); the one other public host (GitHub, for the detector) is stood in for by a local
server holding the same bytes."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import av
import pytest

from conftest import ROOT, frame_count, read_jsonl

# Alone, after the rest: it installs an environment, encodes a clip and runs two cameras
# through the detector, which would starve the live cameras of the tests beside it.
pytestmark = pytest.mark.serial


def _user_env(download_base: str) -> dict[str, str]:
    """The environment a user's shell has: no mirror, no test assets, no venv of ours."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIPELINE_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(ROOT)))
    env["PIPELINE_DOWNLOAD_BASE"] = download_base
    return env


def test_make_run_passes_in_a_clone_with_no_shared(tmp_path, serve, model_path):
    public = tmp_path / "github"
    public.mkdir()
    shutil.copyfile(model_path("public/yolox_nano.onnx"), public / "yolox_nano.onnx")
    clone = tmp_path / "user" / "pipeline"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    assert not (clone.parent / "shared").exists()

    r = subprocess.run(["make", "run"], cwd=clone, env=_user_env(serve(public)), capture_output=True, text=True,
                       timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]

    assert serve.requests == ["/yolox_nano.onnx"]  # the detector from its public file, once
    fetched = sorted(p.name for p in (clone / "models").glob("*.onnx"))
    assert fetched == ["yolox_nano.onnx"]  # what the sample config names, nothing it does not use
    for camera, clip in (("campus", "vtest.mp4"), ("street", "bikes.mp4")):
        video = clone / "out" / f"{camera}.mp4"
        assert frame_count(str(video)) == frame_count(str(clone / "samples" / clip)), camera
        with av.open(str(video)) as c:
            assert c.streams.video[0].codec_context.name == "h264"
    rows = read_jsonl(str(clone / "out" / "detections.jsonl"))
    assert {row["camera"] for row in rows} == {"campus", "street"}
    assert sum(len(row["detections"]) for row in rows) > 1000  # people on the path, cars in the street
    assert Path(clone / "out" / "report.json").is_file()
