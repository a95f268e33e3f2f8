"""The reconnect policy's lines over a long outage: each backoff step once, then reminders
with the attempt count at doubling intervals, never one per attempt and never silence."""
from __future__ import annotations

from pipeline.config import ReconnectConfig
from pipeline.sources.reconnect import REMIND_FIRST_S, REMIND_MAX_S, Reconnect

OPEN_S = 1.0  # what each refused attempt itself takes, on top of the wait


def outage(hours: float) -> tuple[list[tuple[float, int]], int]:
    """A camera refused for `hours` on a simulated clock: when each news line came, with
    its attempt number, and how many attempts there were."""
    now = [0.0]
    rc = Reconnect(ReconnectConfig(initial_s=0.5, max_s=2, give_up_s=0), clock=lambda: now[0], jitter=lambda: 1.0)
    said, attempts = [], 0
    while now[0] < hours * 3600:
        rc.lost()
        retry = rc.retry()
        attempts += 1
        assert retry.attempt == attempts
        if retry.news:
            said.append((now[0], retry.attempt))
        now[0] += retry.delay + OPEN_S
    return said, attempts


def test_a_camera_down_for_hours_keeps_saying_so_at_doubling_intervals_not_each_attempt():
    said, attempts = outage(hours=3)
    times = [t for t, _ in said]
    assert [n for _, n in said[:3]] == [1, 2, 3]  # the backoff steps 0.5, 1, 2 s: each said once
    gaps = [b - a for a, b in zip(times[2:], times[3:])]  # the reminders, once at the longest step
    assert gaps and gaps[0] >= REMIND_FIRST_S
    assert all(b >= a for a, b in zip(gaps, gaps[1:]))  # the intervals grow ...
    assert max(gaps) <= REMIND_MAX_S + 2 + OPEN_S       # ... up to the cap: never silent for long
    assert 3 * 3600 - times[-1] <= REMIND_MAX_S + 2 + OPEN_S
    assert len(said) < attempts / 100  # thousands of attempts, a few dozen lines


def test_a_frame_starts_the_attempts_and_the_lines_again():
    now = [0.0]
    rc = Reconnect(ReconnectConfig(initial_s=0.5, max_s=2, give_up_s=0), clock=lambda: now[0], jitter=lambda: 1.0)
    rc.frame()
    for _ in range(5):
        rc.lost()
        rc.retry()
        now[0] += 3
    assert rc.attempts == 5
    rc.frame()
    rc.lost()
    first = rc.retry()
    assert (rc.attempts, first.attempt, first.news) == (1, 1, True)
