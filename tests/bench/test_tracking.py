"""`pipeline bench --tracking` on a sequence the test makes: py-motmetrics scores it."""
import numpy as np
from mot_gt import write_gt

from pipeline.bench import tracking
from pipeline.bench.motdata import Detections, read_mot
from pipeline.cli import main


def test_a_perfect_tracker_scores_full_marks_and_a_swap_costs_a_switch(tmp_path):
    seq = read_mot(write_gt(tmp_path / "gt.txt", people=2, frames=10))
    perfect = [(b, i) for b, i in zip(seq.boxes, seq.ids)]
    assert tracking.overall([tracking.accumulate(seq, perfect)], ["s"])["mota"] == 1.0
    swapped = perfect[:5] + [(b, i[::-1]) for b, i in perfect[5:]]
    scores = tracking.overall([tracking.accumulate(seq, swapped)], ["s"])
    assert scores["num_switches"] == 2 and scores["idf1"] < 1.0


def test_our_tracker_is_run_on_the_detections_and_timed():
    boxes = np.array([[0, 0, 40, 80], [200, 0, 240, 80]], np.float64)
    dets = [Detections(boxes + 5 * f, np.array([0.9, 0.9]), np.array([1, 2])) for f in range(5)]
    tracked, seconds = tracking.run_tracker(tracking.ours(), dets)
    assert [ids.tolist() for _, ids in tracked] == [[1, 2]] * 5 and seconds > 0


def test_the_command_prints_the_table_for_the_levels_asked(tmp_path, capsys):
    gt = write_gt(tmp_path / "gt.txt", people=3, frames=30)
    assert main(["bench", "--tracking", "--gt", str(gt), "--seeds", "1", "--levels", "clean", "hard"]) == 0
    out = capsys.readouterr().out
    for family in ("persistent", "sporadic", "occlusion"):  # every level in every noise family
        assert f"| {family} | clean | this project |" in out
        assert f"| {family} | hard | this project |" in out
    for family in ("persistent", "sporadic"):  # clean: every box there (occlusion's hide people)
        assert f"| {family} | clean | this project | 100.0 |" in out


def test_an_unknown_level_is_a_one_line_error(tmp_path, capsys):
    gt = write_gt(tmp_path / "gt.txt")
    assert main(["bench", "--tracking", "--gt", str(gt), "--levels", "extreme"]) == 2
    assert "--levels: unknown extreme" in capsys.readouterr().err


def test_detecting_one_frame_in_k_adds_a_row_scored_on_every_frame(tmp_path, capsys):
    gt = write_gt(tmp_path / "gt.txt", people=3, frames=30)
    assert main(["bench", "--tracking", "--gt", str(gt), "--seeds", "1", "--levels", "clean",
                 "--detect-every", "1", "3"]) == 0
    out = capsys.readouterr().out
    assert "| persistent | clean | this project | 100.0 |" in out
    assert "| persistent | clean | this project, detector on 1 frame in 3 |" in out
    assert main(["bench", "--tracking", "--gt", str(gt), "--detect-every", "0"]) == 2
    assert "--detect-every" in capsys.readouterr().err


def test_between_detections_our_tracker_reports_its_tracks_predicted():
    boxes = np.array([[0, 0, 40, 80]], np.float64)
    dets = [Detections(boxes + 5 * f, np.array([0.9]), np.array([1])) for f in range(6)]
    tracked, _ = tracking.run_tracker(tracking.ours(), dets, every=3)
    assert [ids.tolist() for _, ids in tracked] == [[1]] * 6
    # after the runs on frames 0 and 3 the track has a velocity: frame 4's box is moved on
    assert tracked[4][0][0, 0] > tracked[3][0][0, 0] + 1
