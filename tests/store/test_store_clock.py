"""The store's clock agrees with the recordings': a segment's start in the store is when
its file began, as the file's name says, however late the camera's first frame reached
the sink."""
import re
import sqlite3
from pathlib import Path

from conftest import cut_clip, run_pipeline
from onnx_models import make_slow_model
from pipeline.recording.segments import STAMP_RE, stamp_seconds


def test_a_segments_start_in_the_store_is_the_one_its_file_name_gives_behind_a_slow_detector(
        tmp_path, sample_path, write_config):
    clip = cut_clip(sample_path("bikes.mp4"), str(tmp_path / "door.mp4"), 6)
    slow = {"path": make_slow_model(str(tmp_path / "slow.onnx"), matmuls=300, shared=True), "layout": "e2e",
            "input_size": 64, "batching": {"max_batch": 1, "max_wait_ms": 0}, "engine": {"workers": 1}}
    config = {"sources": [{"id": "door", "uri": clip}], "models": {"det": slow},
              "graph": [{"detect": {"model": "det"}}],
              "outputs": {"video": {"enabled": False}, "record": {"enabled": True}}}
    out = tmp_path / "out"
    run_pipeline(config, write_config, str(out))
    rows = sqlite3.connect(out / "store.db").execute('SELECT path, start FROM segments').fetchall()
    assert rows, "no recording segment stored"
    for path, start in rows:
        assert (out / path).exists(), path
        named = stamp_seconds(re.search(STAMP_RE, Path(path).name).group(0))
        # the name is the start to the second, rounded down
        assert -0.25 <= start - named < 1.25, (path, start - named)
