"""MOTChallenge ground truth and the seeded noisy detector made from it."""
import numpy as np
import pytest

from mot_gt import write_gt
from pipeline.bench.motdata import FAMILIES, bundled_ground_truth, hidden_share, noisy, read_mot


def test_ground_truth_is_read_per_frame_without_the_rows_not_to_consider(tmp_path):
    seq = read_mot(write_gt(tmp_path / "gt.txt", people=2, frames=5))
    assert len(seq.ids) == 5 and seq.ids[2].tolist() == [1, 2]
    np.testing.assert_allclose(seq.boxes[0][0], [24, 120, 84, 280])


def test_a_file_that_is_not_ground_truth_is_named_in_the_error(tmp_path):
    bad = tmp_path / "gt.txt"
    bad.write_text("not,a,number\n")
    with pytest.raises(ValueError, match="gt.txt"):
        read_mot(bad)


def test_the_bundled_ground_truth_is_the_two_tud_sequences():
    seqs = [read_mot(p) for p in bundled_ground_truth()]
    assert [s.name for s in seqs] == ["TUD-Campus", "TUD-Stadtmitte"]
    assert sum(len(s.ids) for s in seqs) == 250


def test_the_noise_is_the_same_for_the_same_seed_and_has_the_levels_rates(tmp_path):
    seq = read_mot(write_gt(tmp_path / "gt.txt", people=4, frames=200))
    for levels in FAMILIES.values():
        a, b = noisy(seq, levels["hard"], 7), noisy(seq, levels["hard"], 7)
        assert all(np.array_equal(x.boxes, y.boxes) and np.array_equal(x.scores, y.scores) for x, y in zip(a, b))
        for level in ("clean", "typical", "hard"):
            dets = noisy(seq, levels[level], 1)
            true = sum(int((d.truth >= 0).sum()) for d in dets)
            false = sum(int((d.truth < 0).sum()) for d in dets)
            assert true / 800 == pytest.approx(1 - levels[level].drop, abs=0.06)
            assert false / 200 == pytest.approx(levels[level].false_positives, abs=0.5)


def missed_runs(dets, people):
    """The lengths of each person's runs of frames without their box."""
    runs, gap = [], dict.fromkeys(range(1, people + 1), 0)
    for d in dets:
        for p in gap:
            if p in d.truth:
                runs += [gap[p]] if gap[p] else []
                gap[p] = 0
            else:
                gap[p] += 1
    return runs


def test_the_sporadic_family_spreads_true_scores_and_repeats_no_false_positive(tmp_path):
    seq = read_mot(write_gt(tmp_path / "gt.txt", people=4, frames=200))
    sporadic, persistent = noisy(seq, FAMILIES["sporadic"]["hard"], 3), noisy(seq, FAMILIES["persistent"]["hard"], 3)
    typical = np.concatenate([d.scores[d.truth >= 0] for d in noisy(seq, FAMILIES["sporadic"]["typical"], 3)])
    assert typical.min() >= 0.4 and 0.1 < (typical < 0.5).mean() < 0.3
    # a false positive of the persistent family is there again on the next frame, at its score
    again = [sum(np.isin(b.scores[b.truth < 0], a.scores[a.truth < 0]).sum() for a, b in zip(f, f[1:]))
             for f in (sporadic, persistent)]
    assert again[0] == 0 and again[1] > 20
    # most misses are single frames, besides runs of 5-10 while hidden
    runs = missed_runs(sporadic, 4)
    assert sum(r == 1 for r in runs) > len(runs) / 2 and max(runs) >= 5
    assert min(missed_runs(persistent, 4)) >= 5


def test_a_person_behind_another_is_partly_hidden():
    front, behind = [100, 100, 160, 300], [130, 80, 190, 260]  # the lower bottom edge is nearer
    share = hidden_share(np.array([front, behind], np.float64))
    assert share[0] == 0 and share[1] == pytest.approx(30 * 160 / (60 * 180))
