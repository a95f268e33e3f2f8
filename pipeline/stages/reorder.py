"""Restore each camera's sequence after stages that complete out of order.

Asynchronous inference with several batches in flight, and classification where a frame
waits for its own crops, can finish frames out of order. Frames carry a gap-free
per-camera `order` (assigned where they enter the first batcher), so a small heap per
camera releases them strictly in order; the end-of-stream marker carries the next order
number and so comes out last.
"""
from __future__ import annotations

import heapq
import itertools

from pipeline.frames import EndOfStream, Item


class Reorderer:
    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._held: dict[str, list] = {}
        self._tie = itertools.count()

    def push(self, item: Item) -> list[Item]:
        """Take one item; return the items now releasable in sequence order."""
        cam = item.camera
        heap = self._held.setdefault(cam, [])
        heapq.heappush(heap, (item.order, next(self._tie), item))
        expected = self._next.get(cam, 0)
        out: list[Item] = []
        while heap and heap[0][0] == expected:
            out.append(heapq.heappop(heap)[2])
            expected += 1
        self._next[cam] = expected
        if not heap:
            del self._held[cam]
        if out and isinstance(out[-1], EndOfStream):
            self._next.pop(cam, None)  # the camera ended; a camera added later with its id starts afresh
        return out
