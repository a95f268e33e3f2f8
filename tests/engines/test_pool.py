"""The shared inference pool: waiting jobs start by priority (later stages first), then in order."""
import threading

from pipeline.engines.pool import WorkerPool


def test_a_waiting_job_of_a_later_stage_starts_before_earlier_stages_jobs():
    pool = WorkerPool("test", 1)
    started = threading.Event()
    release = threading.Event()
    order: list[str] = []
    try:
        pool.put(lambda: (started.set(), release.wait(10)))  # keeps the only worker busy
        assert started.wait(10)
        pool.put(lambda: order.append("detect 1"), priority=0)
        pool.put(lambda: order.append("detect 2"), priority=0)
        pool.put(lambda: order.append("classify"), priority=1)
        release.set()
    finally:
        pool.close()
    assert order == ["classify", "detect 1", "detect 2"]
