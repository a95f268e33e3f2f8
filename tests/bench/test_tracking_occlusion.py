"""The bench's occlusion family (people hidden for up to a second, back weak) and its
runs on noise it was not tuned on (`pipeline.bench.heldout`)."""
import pytest
from mot_gt import write_gt

from pipeline.bench import heldout
from pipeline.bench.motdata import FAMILIES, noisy, read_mot


def seen_frames(dets, person):
    """The frames a person's box is detected on, and its score on each."""
    return [(f, float(d.scores[d.truth == person][0])) for f, d in enumerate(dets) if person in d.truth]


def test_a_share_of_the_people_is_hidden_once_for_a_run_and_comes_back_weak(tmp_path):
    seq = read_mot(write_gt(tmp_path / "gt.txt", people=20, frames=80))
    noise = FAMILIES["occlusion"]["clean"]
    dets = noisy(seq, noise, 4)
    hidden = 0
    for person in range(1, 21):
        seen = seen_frames(dets, person)
        frames = [f for f, _ in seen]
        assert frames[0] == 0 and frames[-1] == 79  # seen before the run and after it
        back = [k for k in range(1, len(frames)) if frames[k] - frames[k - 1] > 1]
        if not back:
            assert min(s for _, s in seen) >= 0.3  # never hidden: never weak
            continue
        hidden += 1
        (k,) = back  # hidden once
        assert noise.occlusion[0] <= frames[k] - frames[k - 1] - 1 <= noise.occlusion[1]
        assert seen[k][1] <= 0.99 * noise.weakened[1] < 0.45  # weak: mostly below a tracker's high threshold
    assert 5 <= hidden <= 15  # about half of the people


def test_the_other_families_draw_the_same_noise_as_before_the_occlusion_family(tmp_path):
    # their seeds' detections, and the figures published on them, do not change
    seq = read_mot(write_gt(tmp_path / "gt.txt", people=3, frames=40))
    for family, boxes, score in (("persistent", 181, 2.2112), ("sporadic", 196, 2.4454)):
        dets = noisy(seq, FAMILIES[family]["hard"], 2)
        assert sum(len(d.boxes) for d in dets) == boxes and round(float(dets[5].scores.sum()), 4) == score


def test_other_noise_changes_every_noisy_level_of_every_family():
    for family, levels in FAMILIES.items():
        for level, noise in levels.items():
            varied = heldout.other(noise)
            assert varied.name == level
            assert (varied == noise) == (family != "occlusion" and level == "clean")  # no noise to change there
    hard = heldout.other(FAMILIES["occlusion"]["hard"])
    assert hard.false_positives < FAMILIES["occlusion"]["hard"].false_positives
    assert hard.occlusion[1] > FAMILIES["occlusion"]["hard"].occlusion[1]


def test_held_out_seeds_are_given_as_a_range():
    assert heldout.seed_range("6-15") == list(range(6, 16)) and heldout.seed_range("7") == [7]
    for bad in ("six", "9-3"):
        with pytest.raises(Exception, match="seeds"):
            heldout.seed_range(bad)


def test_the_held_out_run_prints_every_family_on_the_seeds_asked(monkeypatch, tmp_path, capsys):
    gt = write_gt(tmp_path / "gt.txt", people=3, frames=30)
    monkeypatch.setattr(heldout, "bundled_ground_truth", lambda: [gt])
    assert heldout.main(["--seeds", "6-7", "--levels", "clean", "--other-noise"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seeds 6..7, other noise parameters than the bench's")
    for family in FAMILIES:
        assert f"| {family} | clean | this project |" in out
