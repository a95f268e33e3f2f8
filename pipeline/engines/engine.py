"""One model, one ONNX Runtime session, asynchronous submission (`InferenceEngine`).

Two ways to run a batch (chosen by the engine's `EnginePlan`):
- `async`: `InferenceSession.run_async`; the model runs on ORT's own intra-op pool and
  calls back from there. ORT refuses it with `intra_op_num_threads=1`.
- `thread`: dispatcher threads (a `WorkerPool`, shared by all CPU engines) run each piece
  plainly or on bound buffers (`binding`). On CPU, N single-threaded concurrent runs use N
  cores with no intra-op synchronisation; on CUDA one worker drives the session on its
  own stream.

Batches are laid into preallocated buffers by the `Packer` (split for fixed-batch models,
padded to `batch_sizes`); a result is a list of chunks `(n_real, outputs)` in input order.
A slot (one buffer set per batch in flight) is free whenever a credit is: runs end before
their results are consumed.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import onnxruntime as ort

from pipeline.config import ModelConfig
from pipeline.engines.batching import BatchPolicy, Input, Packer, Piece
from pipeline.engines.binding import DeviceBinder, HostBinder, run_plain
from pipeline.engines.model_check import open_model
from pipeline.engines.plan import EnginePlan, plan_engine
from pipeline.engines.pool import WorkerPool
from pipeline.engines.protocol import Chunks, DoneCallback, EngineClosed
from pipeline.engines.session import GPU_PROVIDERS, output_names, requested_providers
from pipeline.metrics.registry import EngineStats

log = logging.getLogger("pipeline.engine")


@dataclass
class _Job:
    slot: int
    pieces: list[Piece]
    done: DoneCallback
    context: object
    results: list
    remaining: int
    wide: bool = False  # run on the wide session (nothing else was running)
    started: float = field(default_factory=time.perf_counter)
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, idx: int, outputs: list | None, err: BaseException | None) -> bool:
        """One piece finished (outputs or error); True when it was the last."""
        with self.lock:
            if err is not None and self.error is None:
                self.error = err
            else:
                self.results[idx] = (self.pieces[idx].count, outputs)
            self.remaining -= 1
            return self.remaining == 0


class Engine:
    def __init__(self, model: ModelConfig, plan: EnginePlan, session: ort.InferenceSession, stats: EngineStats,
                 pool: WorkerPool | None = None, wide_session: ort.InferenceSession | None = None, priority: int = 0):
        self.model, self.plan, self.session, self.stats = model, plan, session, stats
        # "Idle cores help the frame at hand": a lone batch submitted while nothing else
        # runs goes to a session with more intra-op threads (`idle_intra_op_threads`).
        self.wide_session = wide_session
        self.providers = session.get_providers()
        self.on_gpu = self.providers[0] in GPU_PROVIDERS
        stats.provider = self.providers[0]
        inp = session.get_inputs()[0]
        self.input_name = inp.name
        self.output_names = output_names(model, session)
        w, h = model.input_size
        self.packer = Packer(model.name, (3, h, w), inp.shape[0] if isinstance(inp.shape[0], int) and inp.shape[0] > 0
                             else None, model.batching.batch_sizes)
        self.binder = self._binder()
        self.policy = BatchPolicy.of(model.batching)
        self.batch_costs: dict[int, float] = {}  # measured seconds per batch, by batch size
        self.priority = priority  # in a shared pool, waiting batches of higher priority start first
        self._own_pool = plan.mode == "thread" and pool is None
        self.pool = pool if not self._own_pool else WorkerPool(f"engine-{model.name}", plan.workers)
        self.max_inflight = plan.max_inflight
        self._cond, self._inflight, self._closed = threading.Condition(), 0, False
        self._slots: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(self.max_inflight):
            self._slots.put(i)
        self._listeners: list[Callable[[], None]] = []  # async mode: told when a run ends

    def _binder(self) -> HostBinder | DeviceBinder | None:
        e = self.model.engine
        if not e.io_binding:
            return None
        if self.on_gpu:
            return DeviceBinder(self.model.name, self.input_name, self.output_names, e.device_id, e.cuda_graph)
        return HostBinder(self.input_name, self.output_names)

    @contextmanager
    def slots_held(self, count: int) -> Iterator[list[int]]:
        """Take `count` buffer slots for runs made outside `submit` (profiling, warming)."""
        slots = [self._slots.get() for _ in range(count)]
        try:
            yield slots
        finally:
            for slot in slots:
                self._slots.put(slot)

    def on_worker(self, job: Callable[[], None]) -> None:
        """Run `job` on the thread that runs this engine's batches, and wait for it."""
        if self.pool is None:
            job()
            return
        ran = threading.Event()
        self.pool.put(lambda: (job(), ran.set()), self.priority)
        ran.wait()

    def has_idle_worker(self) -> bool:
        if self.pool is None:
            return self._inflight == 0
        return self.pool.has_idle_worker()

    def on_free(self, listener: Callable[[], None]) -> None:
        if self.pool is None:
            self._listeners.append(listener)
        else:
            self.pool.on_free(listener)

    def wait_ready(self, timeout: float | None = None) -> bool:
        with self._cond:
            ready = self._cond.wait_for(lambda: self._inflight < self.max_inflight or self._closed, timeout)
            if self._closed:
                raise EngineClosed(self.model.name)
            return ready

    def submit(self, tensors: list[Input], done: DoneCallback, context: object = None) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._inflight < self.max_inflight or self._closed)
            if self._closed:
                raise EngineClosed(self.model.name)
            self._inflight += 1
        slot = self._slots.get()
        try:
            pieces = self.packer.pieces(slot, tensors)
        except BaseException:
            self._slots.put(slot)
            self.consumed()
            raise
        wide = self.wide_session is not None and len(pieces) == 1 and self.pool is not None and self.pool.is_idle()
        job = _Job(slot, pieces, done, context, results=[None] * len(pieces), remaining=len(pieces), wide=wide)
        self.stats.submitted()
        if self.pool is None:
            for idx, piece in enumerate(pieces):
                self.session.run_async(self.output_names, {self.input_name: piece.buffer}, self._on_async, (job, idx))
        else:
            self.pool.put(lambda: self._execute(job), self.priority)

    def infer(self, tensors: list[Input]) -> Chunks:
        """Synchronous run of one batch (tests, the benchmark, start-up checks)."""
        out: list = []
        event = threading.Event()
        self.submit(tensors, lambda chunks, err, _: (out.append((chunks, err)), event.set()))
        event.wait()
        self.consumed()
        chunks, err = out[0]
        if err is not None:
            raise err
        return chunks

    def consumed(self) -> None:
        with self._cond:
            self._inflight -= 1
            self._cond.notify_all()

    def _on_async(self, outputs: list, user_data: tuple, err: str) -> None:
        self._piece_done(*user_data, outputs, RuntimeError(err) if err else None)

    def _execute(self, job: _Job) -> None:
        for idx, piece in enumerate(job.pieces):
            try:
                self._piece_done(job, idx, self.run_piece(piece, job.wide), None)
            except BaseException as e:  # reported to the caller through `done`
                self._piece_done(job, idx, None, e)

    def run_piece(self, piece: Piece, wide: bool = False) -> list[np.ndarray]:
        session = self.wide_session if wide and self.wide_session is not None else self.session
        if self.binder is None or self.pool is None:
            return run_plain(session, self.output_names, self.input_name, piece, self.model.engine.cuda_graph)
        return self.binder.run(session, (wide, *piece.key), piece)

    def _piece_done(self, job: _Job, idx: int, outputs: list | None, err: BaseException | None) -> None:
        if not job.record(idx, outputs, err):
            return
        self.stats.finished(sum(p.count for p in job.pieces), time.perf_counter() - job.started)
        self._slots.put(job.slot)
        for listener in self._listeners:
            listener()
        try:
            job.done(None if job.error else job.results, job.error, job.context)
        except BaseException:  # a broken callback must not kill an ORT or engine thread
            log.exception("engine %s: completion callback failed", self.model.name)

    def close(self) -> None:
        """Stop taking batches: whoever waits to submit gets `EngineClosed`."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._own_pool and self.pool is not None:
            self.pool.close()


def open_engine(model: ModelConfig, stats: EngineStats | None = None, cores: int = 1,
                workers: int | None = None) -> Engine:
    """A stand-alone engine with its own session and workers (tests, tools, the benchmark)."""
    opened = open_model(model, cores)
    plan = plan_engine(model, cores, opened.on_gpu, shared_pool=False)
    if workers is not None and plan.mode == "thread":
        plan = plan.with_workers(workers)
    return Engine(model, plan, opened.session, stats or EngineStats(), wide_session=opened.wide)


def describe(engine: Engine) -> str:
    """The engine's start-up line: provider, batch shape, dispatch, in-flight credits."""
    model, p = engine.model, engine.plan
    wanted = requested_providers(model)
    note = f" ({wanted[0]} asked for but not available here)" if wanted[0] != engine.providers[0] else ""
    fixed = engine.packer.fixed_batch
    batch = f"fixed batch {fixed} (batches are split)" if fixed else "dynamic batch"
    how = (f"run_async on ORT's pool, intra_op={p.intra_op_threads}" if p.mode == "async"
           else f"{p.workers} worker(s){' shared' if p.shared else ''}, intra_op={p.intra_op_threads}, "
                f"io_binding={'on' if model.engine.io_binding else 'off'}")
    extra = ", CUDA graphs" if engine.on_gpu and model.engine.cuda_graph else ""
    if engine.wide_session is not None:
        extra += f", a lone batch on {p.idle_intra_op_threads} threads while nothing else runs"
    return f"model {model.name}: {engine.providers[0]}{note}; {batch}; {how}{extra}; {engine.max_inflight} " \
           f"batch(es) in flight"


def describe_costs(engine: Engine) -> str:
    costs = ", ".join(f"{s}: {1000 * c / s:.1f}" for s, c in sorted(engine.batch_costs.items()))
    return f"model {engine.model.name}: ms per item by batch size {{{costs}}}; preferred batch " \
           f"{engine.policy.preferred}"
