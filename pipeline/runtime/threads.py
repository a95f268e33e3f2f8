"""What this machine's processor is, and what the run may use for work that grows with the
cameras (`Capacity`). Its cores (and the other limits of the machine) are
`pipeline.config.limits`; the process's thread plan, which sizes every pool from these,
is `pipeline.engines.plan`."""
from __future__ import annotations

import platform
from dataclasses import dataclass


def cpu_name() -> str:
    """The processor's model name (Linux), else what Python knows."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class Capacity:
    """What the run may use for work that grows with the cameras, decided here only: the
    sink grows its workers as cameras come (configured at start or added while running)."""

    cores: int

    def sink_workers(self, cameras: int) -> int:
        """Encoding workers for this many cameras: one per camera up to half the cores
        (inference needs the rest)."""
        return max(1, min(cameras, self.cores // 2))
