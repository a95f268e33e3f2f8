"""A recording's bad input, each on its own: a codec its container cannot hold, and a disk
that refuses to write. Either stops that camera's recording, counted and reported, while
the camera's analysis and the other cameras go on and the files written stay playable."""
from __future__ import annotations

import os
import resource

import av
import numpy as np

from conftest import read_jsonl, run_pipeline
from recordings import null_detector, packets, segments


def noisy_clip(path: str, size: tuple[int, int], frames: int, codec: str = "libx264", **options: str) -> str:
    """Noise pictures, every one a keyframe: large packets, a fragment each."""
    w, h = size
    rng = np.random.default_rng(0)
    with av.open(path, "w") as out:
        s = out.add_stream(codec, rate=10)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"g": "1", **options}
        for i in range(frames):
            vf = av.VideoFrame.from_ndarray(rng.integers(0, 255, (h, w, 3), np.uint8), format="bgr24")
            vf = vf.reformat(format="yuv420p")
            vf.pts = i
            for p in s.encode(vf):
                out.mux(p)
        for p in s.encode(None):
            out.mux(p)
    return path


def decodable(path: str) -> int:
    """The pictures a player shows from a file, skipping a packet it cannot decode."""
    shown = 0
    with av.open(path) as c:
        for packet in c.demux(video=0):
            try:
                shown += len(packet.decode())
            except av.error.InvalidDataError:
                continue
    return shown


def cameras_config(folder, **uris: str) -> dict:
    return {"sources": [{"id": cam, "uri": uri} for cam, uri in uris.items()],
            "models": {"det": null_detector(folder)}, "graph": [{"detect": {"model": "det"}}],
            "outputs": {"video": {"enabled": False}, "jsonl": {"filename": "{camera}.jsonl"},
                        "record": {"enabled": True}}}


def test_a_codec_the_container_cannot_hold_stops_the_recording_not_the_camera(tmp_path, write_config):
    vp8 = noisy_clip(str(tmp_path / "cam.webm"), (64, 48), 10, "libvpx", deadline="realtime", **{"cpu-used": "8"})
    out = str(tmp_path / "out")
    snap = run_pipeline(cameras_config(tmp_path, cam=vp8), write_config, out)
    cam = snap.cameras["cam"]
    assert cam.processed == 10 and cam.state == "ended"
    why = cam.output_errors["recording"]
    assert "cannot hold vp8 video" in why and "record to .mkv" in why
    assert cam.recording is not None and cam.recording.state == "failed" and cam.recording.packets == 0
    assert segments(out, "cam") == []
    rows = read_jsonl(os.path.join(out, "cam.jsonl"))
    assert len(rows) == 10 and all(r["recording"] is None and r["recording_time"] is None for r in rows)


def test_a_disk_that_refuses_to_write_stops_that_recording_and_the_files_written_stay_playable(tmp_path,
                                                                                                write_config):
    """A file size limit stands in for a full disk (the write is refused the same way, for
    the one camera whose recording reaches it): its recording stops, counted, the file
    plays up to its last fragment; its analysis goes on; the other camera records on."""
    big = noisy_clip(str(tmp_path / "big.mp4"), (320, 192), 20, crf="5")
    small = noisy_clip(str(tmp_path / "small.mp4"), (64, 48), 20)
    assert os.path.getsize(big) > 3 * 400_000 > 3 * os.path.getsize(small)
    out = str(tmp_path / "out")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, hard))
    try:
        snap = run_pipeline(cameras_config(tmp_path, big=big, small=small), write_config, out)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    failed, fine = snap.cameras["big"], snap.cameras["small"]
    assert failed.processed == fine.processed == 20
    assert "File too large" in failed.output_errors["recording"] and failed.recording.state == "failed"
    assert fine.recording.state == "ended" and not fine.output_errors
    assert [p for f in segments(out, "small") for p in packets(f)] == packets(small)
    (partial,) = segments(out, "big")
    kept, sent = packets(partial), packets(big)
    assert 1 < len(kept) < 20 and kept[:-1] == sent[:len(kept) - 1]  # what was written plays,
    assert sent[len(kept) - 1][0].startswith(kept[-1][0])  # up to the fragment the disk cut short
    assert decodable(partial) >= len(kept) - 1
    rows = read_jsonl(os.path.join(out, "big.jsonl"))
    named = [r["recording"] is not None for r in rows]
    # rows name the file until its failure is known, none after; a refusal that comes without
    # warning (no free-space check sees a file size limit) may leave rows written before it
    # naming the fragment it cut (docs/outputs.md, Recordings: a disk that fills up)
    assert len(rows) == 20 and rows[0]["recording"] == os.path.basename(partial)
    assert named == sorted(named, reverse=True) and sum(named) >= len(kept) - 1
