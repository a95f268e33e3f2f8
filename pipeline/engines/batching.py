"""Forming batches: when a batch is worth waiting for (`BatchPolicy`) and how items are
laid into the model's input buffers (`Packer`).

`BatchPolicy` is the one rule the detector's batcher, the classifier's crop batcher and
the detector's read admission share: a batch goes at once when a worker is idle (latency
first), and items are held for a fuller batch only while every worker is busy anyway, up
to the engine's preferred size (measured: where batching really saves cost per item) or
`max_wait`.

`Packer` copies items into buffers allocated once per (slot, offset, padded size): a
fixed-batch model (many exports have batch 1) gets its batches split into pieces of its
batch, and `batch_sizes` pads a batch to an allowed size (fixed shapes for CUDA graphs
and TensorRT profiles).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.config import BatchingConfig
from pipeline.preprocess import ModelInput

Input = np.ndarray | ModelInput  # [3, H, W] float32, or a picture normalised on the way in


@dataclass(frozen=True)
class BatchPolicy:
    max_batch: int
    max_wait_s: float
    preferred: int = 1  # the batch worth holding items back for (measured per model)

    @classmethod
    def of(cls, batching: BatchingConfig, measured: int = 1) -> "BatchPolicy":
        return cls(batching.max_batch, batching.max_wait_ms / 1000.0, batching.preferred or measured)

    @property
    def target(self) -> int:
        """The size a batch is formed up to (and the frames worth reading ahead of it)."""
        return max(1, min(self.max_batch, self.preferred))

    def due(self, waiting: int, idle_worker: bool) -> bool:
        """Submit what waits now: a worker is idle (never hold an item then), or the
        preferred batch is full."""
        return waiting > 0 and (idle_worker or waiting >= self.target)


@dataclass
class Piece:
    count: int            # real items in it (the rest is padding)
    buffer: np.ndarray    # the preallocated input batch
    key: tuple            # (slot, offset, padded size): its buffers and binding


class Packer:
    def __init__(self, name: str, item_shape: tuple[int, int, int], fixed_batch: int | None,
                 batch_sizes: list[int] | None):
        self.name = name
        self.item_shape = item_shape
        self.fixed_batch = fixed_batch
        self.batch_sizes = [fixed_batch] if fixed_batch else batch_sizes  # None: any size
        self._buffers: dict[tuple, np.ndarray] = {}

    def padded_size(self, n: int) -> int:
        if not self.batch_sizes:
            return n
        for s in self.batch_sizes:
            if s >= n:
                return s
        return self.batch_sizes[-1]

    def sizes_in_use(self, limit: int) -> list[int]:
        """Every input batch size a batch of 1..`limit` items runs as."""
        return sorted({self.padded_size(min(n, self.fixed_batch or n)) for n in range(1, limit + 1)})

    def sizes_up_to(self, limit: int) -> list[int]:
        """The input batch sizes runs will use: powers of two up to `limit`, as padded."""
        return sorted({self.padded_size(s) for s in (1 << k for k in range(8)) if s <= limit} | {self.padded_size(1)})

    def pieces(self, slot: int, tensors: list[Input]) -> list[Piece]:
        """Copy the items into this slot's buffers, split and padded as the model needs."""
        step = self.fixed_batch or (self.batch_sizes[-1] if self.batch_sizes else len(tensors))
        out = []
        for start in range(0, len(tensors), step):
            part = tensors[start:start + step]
            size = self.padded_size(len(part))
            key = (slot, start, size)
            buf = self._buffers.get(key)
            if buf is None:
                buf = self._buffers[key] = np.zeros((size, *self.item_shape), np.float32)
            for i, t in enumerate(part):
                if tuple(t.shape) != self.item_shape:
                    raise ValueError(f"model {self.name}: input tensor shape {list(t.shape)} != "
                                     f"{list(self.item_shape)}")
                if isinstance(t, np.ndarray):
                    buf[i] = t
                else:
                    t.write(buf[i])
            if len(part) < size:
                buf[len(part):] = 0
            out.append(Piece(len(part), buf, key))
        return out
