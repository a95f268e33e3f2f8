"""Per-track classification state."""
from pipeline.stages.classify import FORGET_AFTER, _TrackLabel, forget_stale


def test_classifier_forgets_tracks_gone_for_long():
    """Per-track label state stays bounded on a camera that runs for months."""
    tracks = {1: _TrackLabel(seen=10), 2: _TrackLabel(seen=FORGET_AFTER + 5), 3: _TrackLabel(seen=0, inflight=1)}
    forget_stale(tracks, FORGET_AFTER + 20)
    assert sorted(tracks) == [2, 3]  # 1 is gone; 3 still has a crop in flight
