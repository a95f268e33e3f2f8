"""Which decoded frames a camera passes on: every `stride`-th, and at most `max_fps`
per second of the camera's own timeline (so the choice does not depend on load)."""
from __future__ import annotations


class FrameGate:
    def __init__(self, stride: int = 1, max_fps: float | None = None):
        self.stride = stride
        self.min_interval = 1.0 / max_fps if max_fps else 0.0
        self._last_kept = -1e18

    def reject(self, seq: int, t: float) -> str | None:
        """Why frame `seq` at camera time `t` (seconds) is skipped, or None to keep it."""
        if seq % self.stride:
            return "stride"
        if self.min_interval:
            if t - self._last_kept < self.min_interval * 0.98:  # 2%: timestamps of real cameras jitter
                return "max_fps"
            self._last_kept = t
        return None
