"""A camera with time-named segments that moves (its host died mid-segment) resumes in the
right place: only the newest segment is cut back to what both outputs hold, older ones
are left whole, and the camera continues in a new segment named after them, every frame
once in name order."""
from __future__ import annotations

import os

from conftest import read_jsonl
from pipeline.cluster.resume import resume_point
from pipeline.metrics.registry import Metrics
from pipeline.sinks.camera_files import CameraOutputs
from pipeline.recording.segments import segment_files
from segment_frames import frame, outputs_config, packets


def write(out, seqs, resume=None) -> None:
    files = CameraOutputs(out, Metrics())
    files.open("cam", live=False, **({"resume": resume} if resume else {}))
    for seq in seqs:
        files.write(frame(seq))
    files.close("cam", last=True)


def in_name_order(tmp_path) -> tuple[list[int], list[int]]:
    """Every segment's seqs (JSON lines) and frames (video), in name order."""
    out = tmp_path / "out"
    lines = [r["seq"] for _, p in segment_files(str(out / "cam.{start}.jsonl")) for r in read_jsonl(p)]
    frames = [len(packets(p)) for _, p in segment_files(str(out / "cam.{start}.mp4"))]
    return lines, frames


def cut_last_jsonl(tmp_path, keep: int) -> None:
    """The host died before the newest segment's JSON lines reached the disk (all but `keep`)."""
    _, last = segment_files(str(tmp_path / "out" / "cam.{start}.jsonl"))[-1]
    with open(last) as f:
        kept = f.readlines()[:keep]
    with open(last, "w") as f:
        f.writelines(kept)
    if not keep:
        os.remove(last)


def test_a_file_camera_resumes_in_a_new_segment_after_the_newest_is_cut_back(tmp_path):
    out = outputs_config(tmp_path, segment_s=1, fragmented=True)
    write(out, range(60))  # segments of 25, 25 and 10 frames
    cut_last_jsonl(tmp_path, 4)
    resume, held = resume_point(out, "cam", same_file=True)
    assert (resume.start_at, held) == (54, 54)
    assert in_name_order(tmp_path) == (list(range(54)), [25, 25, 4])  # the video cut back to the lines
    write(out, range(54, 80), resume)  # the new host: the same file from frame 54 on
    lines, frames = in_name_order(tmp_path)
    assert lines == list(range(80)) and sum(frames) == 80 and len(frames) >= 4


def test_a_newest_segment_with_no_lines_goes_whole_and_the_camera_resumes_before_it(tmp_path):
    out = outputs_config(tmp_path, segment_s=1, fragmented=True)
    write(out, range(60))
    cut_last_jsonl(tmp_path, 0)
    resume, held = resume_point(out, "cam", same_file=False)
    assert (resume.seq, held) == (50, 50) and abs(resume.time_s - 50 * 0.04) < 1e-6
    assert in_name_order(tmp_path) == (list(range(50)), [25, 25])
