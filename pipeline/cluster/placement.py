"""Which camera runs where: cameras are placed by their estimated cost on the hosts
(one pipeline actor per GPU, or per group of CPU cores) with the most room.

A camera's cost is the CPU time its frames take per second: its frame rate (after
`stride` / `max_fps`) times the per-frame cost of every stage, decode and encode scaled
by its pixels — the same per-stage cost model `pipeline bench` measures. Placement is
greedy, largest camera first, each onto the host whose load is the smallest share of
its capacity (LPT scheduling: within 4/3 of the best packing). Cameras of a host that
dies are placed the same way on the survivors; cameras already running never move.
"""
from __future__ import annotations

from dataclasses import dataclass, field

REFERENCE_PIXELS = 768 * 576  # the clip the default costs were measured on


@dataclass(frozen=True)
class CostModel:
    """Per-frame milliseconds of CPU by stage, at `REFERENCE_PIXELS` for the stages that
    scale with the picture (decode, encode, preprocess, drawing)."""

    per_pixel_ms: float = 1.04 + 1.35 + 0.5 + 0.19    # decode, encode, preprocess, annotate
    fixed_ms: float = 10.27 + 0.19                     # detector (YOLOX-nano, one core), postprocess
    gpu_fixed_ms: float | None = None                  # the fixed part on a GPU host (measured there)

    @classmethod
    def from_limit(cls, limit: dict) -> "CostModel":
        """From `bench.limit.measure_costs` (ms per frame by stage, measured here)."""
        c = limit["cost_ms"]
        scaled = sum(c.get(k, 0.0) for k in ("decode", "encode", "preprocess", "annotate"))
        return cls(per_pixel_ms=scaled, fixed_ms=sum(v for k, v in c.items() if k not in
                                                     ("decode", "encode", "preprocess", "annotate")))

    def frame_ms(self, pixels: int, gpu: bool = False) -> float:
        fixed = self.gpu_fixed_ms if gpu and self.gpu_fixed_ms is not None else self.fixed_ms
        return self.per_pixel_ms * pixels / REFERENCE_PIXELS + fixed


@dataclass(frozen=True)
class CameraLoad:
    camera: str
    fps: float
    pixels: int

    def cost(self, model: CostModel, gpu: bool = False) -> float:
        """CPU milliseconds per second (1000 = one core busy)."""
        return self.fps * model.frame_ms(self.pixels, gpu)


@dataclass
class Host:
    name: str
    capacity: float                 # CPU milliseconds per second it offers (1000 per core)
    gpu: bool = False
    cameras: dict[str, float] = field(default_factory=dict)  # camera -> its cost here

    @property
    def load(self) -> float:
        return sum(self.cameras.values())

    def share(self, extra: float = 0.0) -> float:
        return (self.load + extra) / self.capacity if self.capacity else float("inf")


def place(cameras: list[CameraLoad], hosts: list[Host], model: CostModel) -> dict[str, str]:
    """Put each camera on a host (largest first, onto the emptiest host relative to its
    capacity); returns camera -> host name. Hosts keep the cameras they already have."""
    if not hosts:
        raise ValueError("no host to place cameras on")
    placed: dict[str, str] = {}
    for cam in sorted(cameras, key=lambda c: -c.cost(model)):
        host = min(hosts, key=lambda h: (h.share(cam.cost(model, h.gpu)), h.name))
        host.cameras[cam.camera] = cam.cost(model, host.gpu)
        placed[cam.camera] = host.name
    return placed


def hosts_needed(cameras: list[CameraLoad], capacity: float, model: CostModel, gpu: bool = False,
                 headroom: float = 0.75) -> int:
    """How many hosts of `capacity` carry `cameras` with each kept at `headroom` of it."""
    hosts: list[Host] = []
    for cam in sorted(cameras, key=lambda c: -c.cost(model, gpu)):
        cost = cam.cost(model, gpu)
        fit = [h for h in hosts if h.load + cost <= headroom * h.capacity]
        if not fit:
            fit = [Host(f"h{len(hosts)}", capacity, gpu)]
            hosts += fit
        min(fit, key=lambda h: h.load).cameras[cam.camera] = cost
    return len(hosts)
