"""One model, one ONNX Runtime session, asynchronous submission.

`submit()` returns as soon as the batch is handed over; at most `max_inflight` batches
are in flight (submit waits beyond that: that is the backpressure). Completion runs the
caller's `done` callback on an engine thread, and that callback must only hand the
result on (a queue put), never do work: this is the seed design's rule. A batch counts
as in flight until its consumer calls `consumed()` after taking the result, so the
hand-over queue never holds more than `max_inflight` results and the callback never
blocks: inference threads shared between engines can then never wait on each other.
`wait_ready()` lets a batcher wait for room *before* it forms a batch, so a batch is
always made of the newest frames at the moment the engine can take it.

Two ways to run a batch (chosen by the engine's `EnginePlan`):
- `async`: `InferenceSession.run_async`; the model runs on ORT's own intra-op pool and
  calls back from there. ORT refuses it with `intra_op_num_threads=1`.
- `thread`: dispatcher threads (a `WorkerPool`, shared by all CPU engines) call
  `run_with_iobinding` (or `run`) on preallocated buffers. On CPU, N single-threaded
  concurrent runs use N cores with no intra-op synchronisation; on CUDA one worker
  drives the session on its own stream.

Fixed-batch models (many exports have batch 1) get their batches split into pieces of
the model's batch; padding to `batch_sizes` keeps input shapes fixed (CUDA graphs,
TensorRT profiles). A result is a list of chunks `(n_real, outputs)` in input order.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnxruntime as ort

from pipeline.config import ModelConfig
from pipeline.engines.pool import WorkerPool
from pipeline.engines.session import GPU_PROVIDERS, create_session, output_names, requested_providers
from pipeline.metrics.registry import EngineStats
from pipeline.preprocess import ModelInput
from pipeline.runtime.threads import EnginePlan, plan_engine, session_threads

log = logging.getLogger("pipeline.engine")

Chunks = list[tuple[int, list[np.ndarray]]]
Input = np.ndarray | ModelInput  # [3, H, W] float32, or a picture normalised on the way in
DoneCallback = Callable[[Chunks | None, BaseException | None, object], None]


class EngineClosed(Exception):
    """The engine was closed (abort): whoever waits to submit should stop."""


@dataclass
class _Piece:
    count: int            # real items in it (the rest is padding)
    buffer: np.ndarray    # the preallocated input batch
    key: tuple            # (slot, offset, padded size): its buffers and binding


@dataclass
class _Job:
    slot: int
    pieces: list[_Piece]
    done: DoneCallback
    context: object
    results: list
    remaining: int
    wide: bool = False  # run on the wide session (nothing else was running)
    started: float = field(default_factory=time.perf_counter)
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def open_wide_session(model: ModelConfig, plan: EnginePlan) -> ort.InferenceSession | None:
    """The second session of `idle_intra_op_threads` (None when the plan has none)."""
    if plan.idle_intra_op_threads <= 1:
        return None
    return create_session(model, plan.idle_intra_op_threads, model.engine.inter_op_threads, spinning=True)


BATCH_GAIN_TOLERANCE = 1.1


def choose_batch(costs: dict[int, float]) -> int:
    """The smallest batch size whose cost per item is within 10% of the cheapest: frames
    are held back for a fuller batch only where that really saves compute."""
    per_item = {s: c / s for s, c in costs.items()}
    best = min(per_item.values())
    return min(s for s, c in per_item.items() if c <= BATCH_GAIN_TOLERANCE * best)


class Engine:
    def __init__(self, model: ModelConfig, plan: EnginePlan, session: ort.InferenceSession, stats: EngineStats,
                 pool: WorkerPool | None = None, wide_session: ort.InferenceSession | None = None):
        self.model = model
        self.plan = plan
        self.stats = stats
        self.session = session
        # "Idle cores help the frame at hand": a lone batch submitted while nothing else
        # runs goes to a session with more intra-op threads (`idle_intra_op_threads`).
        self.wide_session = wide_session
        self.providers = session.get_providers()
        self.on_gpu = self.providers[0] in GPU_PROVIDERS
        self.device = "cuda" if self.on_gpu else "cpu"  # where device-side buffers live
        stats.provider = self.providers[0]
        inp = session.get_inputs()[0]
        self.input_name = inp.name
        self.output_names = output_names(model, session)
        self.fixed_batch = inp.shape[0] if isinstance(inp.shape[0], int) and inp.shape[0] > 0 else None
        w, h = model.input_size
        self.item_shape = (3, h, w)
        self.batch_sizes = [self.fixed_batch] if self.fixed_batch else model.batching.batch_sizes  # None: any
        self._own_pool = plan.mode == "thread" and pool is None
        self.pool = pool if pool is not None or plan.mode != "thread" else WorkerPool(f"engine-{model.name}",
                                                                                        plan.workers)
        self.max_inflight = plan.max_inflight
        self._cond = threading.Condition()
        self._inflight = 0
        self._slots: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(self.max_inflight):
            self._slots.put(i)
        self._buffers: dict[tuple, np.ndarray] = {}
        self._bindings: dict[tuple, object] = {}
        self._device_inputs: dict[tuple, ort.OrtValue] = {}
        self._bound_outputs: dict[tuple, ort.OrtValue] = {}  # preallocated, alive as long as their binding
        self._dynamic_outputs: dict[tuple, list[str]] = {}  # outputs bound afresh before every run
        self._own_outputs: dict[tuple, list[tuple[str, list[int]]]] = {}  # CPU: each run writes new arrays
        self._graph_ids: dict[tuple, int] = {}
        self._closed = False
        self._listeners: list[Callable[[], None]] = []
        self.batch_costs: dict[int, float] = {}  # measured seconds per batch, by batch size
        self.preferred_batch = 1                   # the smallest batch that runs about as cheaply per item as any
        self.priority = 0  # in a shared pool, waiting batches of higher priority start first (later stages)

    @classmethod
    def open(cls, model: ModelConfig, stats: EngineStats | None = None, cores: int = 1,
             workers: int | None = None) -> "Engine":
        """A stand-alone engine with its own session and workers (tests, tools, the benchmark)."""
        session = create_session(model, session_threads(model, cores), model.engine.inter_op_threads)
        on_gpu = session.get_providers()[0] in GPU_PROVIDERS
        plan = plan_engine(model, cores, on_gpu, shared_pool=False)
        if workers is not None and plan.mode == "thread":
            plan = plan.with_workers(workers)
        return cls(model, plan, session, stats or EngineStats(), wide_session=open_wide_session(model, plan))

    def describe(self) -> str:
        wanted = requested_providers(self.model)
        note = ""
        if wanted[0] != self.providers[0]:
            note = f" ({wanted[0]} asked for but not available here)"
        batch = f"fixed batch {self.fixed_batch} (batches are split)" if self.fixed_batch else "dynamic batch"
        p = self.plan
        how = (f"run_async on ORT's pool, intra_op={p.intra_op_threads}" if p.mode == "async"
               else f"{p.workers} worker(s){' shared' if p.shared else ''}, intra_op={p.intra_op_threads}, "
                    f"io_binding={'on' if self.model.engine.io_binding else 'off'}")
        graph = ", CUDA graphs" if self.on_gpu and self.model.engine.cuda_graph else ""
        if self.wide_session is not None:
            graph += f", a lone batch on {p.idle_intra_op_threads} threads while nothing else runs"
        return f"model {self.model.name}: {self.providers[0]}{note}; {batch}; {how}{graph}; " \
               f"{self.max_inflight} batch(es) in flight"

    # -- scheduling facts ---------------------------------------------------------------
    def profile(self, repeats: int = 3) -> None:
        """Measure the cost of a batch by size (powers of two up to `max_batch`, or the
        allowed padded sizes) and pick `preferred_batch` (`choose_batch`). On a CPU
        batching saves little (1 is preferred: frames are never held back for a batch); on
        a GPU it saves most of the cost. Every size runs once untimed first (ORT allocates
        on a size's first run), then the sizes take turns and each keeps its fastest run:
        a busy moment of the machine cannot make one size look cheaper than another."""
        w, h = self.model.input_size
        item = np.zeros((3, h, w), np.float32)
        limit = self.model.batching.max_batch
        sizes = sorted({self.padded_size(s) for s in (1 << k for k in range(8)) if s <= limit} | {self.padded_size(1)})
        for size in sizes:
            self.infer([item] * size)
        times: dict[int, list[float]] = {s: [] for s in sizes}
        for _ in range(repeats):
            for size in sizes:
                times[size].append(self._time_batch([item] * size))
        self.batch_costs = {s: min(t) for s, t in times.items()}
        self.preferred_batch = self.model.batching.preferred or choose_batch(self.batch_costs)
        self.stats.reset()

    def _time_batch(self, tensors: list[Input]) -> float:
        """Seconds the model takes for one batch, run here: what a batch costs, without
        the hand-over to a worker and back (a fixed cost that would favour big batches)."""
        slot = self._slots.get()
        try:
            pieces = self._pieces(slot, tensors)
            t0 = time.perf_counter()
            for piece in pieces:
                if self.plan.mode == "async":
                    self.session.run(self.output_names, {self.input_name: piece.buffer})
                else:
                    self._run(piece)
            return time.perf_counter() - t0
        finally:
            self._slots.put(slot)

    def describe_costs(self) -> str:
        costs = ", ".join(f"{s}: {1000 * c / s:.1f}" for s, c in sorted(self.batch_costs.items()))
        return f"model {self.model.name}: ms per item by batch size {{{costs}}}; preferred batch {self.preferred_batch}"

    def has_idle_worker(self) -> bool:
        """A batch submitted now would start at once."""
        if self.plan.mode == "async":
            return self._inflight == 0
        assert self.pool is not None
        return self.pool.has_idle_worker()

    def on_free(self, listener: Callable[[], None]) -> None:
        """Call `listener` (cheap, non-blocking) whenever a run ends and its worker frees up."""
        if self.plan.mode == "async":
            self._listeners.append(listener)
        else:
            assert self.pool is not None
            self.pool.on_free(listener)

    # -- submission ---------------------------------------------------------------------
    def padded_size(self, n: int) -> int:
        if not self.batch_sizes:
            return n
        for s in self.batch_sizes:
            if s >= n:
                return s
        return self.batch_sizes[-1]

    def _pieces(self, slot: int, tensors: list[Input]) -> list[_Piece]:
        """Copy the items into this slot's preallocated buffers, split and padded as the model needs."""
        step = self.fixed_batch or (self.batch_sizes[-1] if self.batch_sizes else len(tensors))
        pieces = []
        for start in range(0, len(tensors), step):
            part = tensors[start:start + step]
            size = self.padded_size(len(part))
            key = (slot, start, size)
            buf = self._buffers.get(key)
            if buf is None:
                buf = self._buffers[key] = np.zeros((size, *self.item_shape), np.float32)
            for i, t in enumerate(part):
                if tuple(t.shape) != self.item_shape:
                    raise ValueError(f"model {self.model.name}: input tensor shape {list(t.shape)} != "
                                     f"{list(self.item_shape)}")
                if isinstance(t, np.ndarray):
                    buf[i] = t
                else:
                    t.write(buf[i])
            if len(part) < size:
                buf[len(part):] = 0
            pieces.append(_Piece(len(part), buf, key))
        return pieces

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until a batch could be submitted without waiting (True), or `timeout` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._inflight >= self.max_inflight:
                if self._closed:
                    raise EngineClosed(self.model.name)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            if self._closed:
                raise EngineClosed(self.model.name)
            return True

    def submit(self, tensors: list[Input], done: DoneCallback, context: object = None) -> None:
        """Hand over one batch; waits only while `max_inflight` batches are already in flight."""
        with self._cond:
            while self._inflight >= self.max_inflight and not self._closed:
                self._cond.wait()
            if self._closed:
                raise EngineClosed(self.model.name)
            self._inflight += 1
        slot = self._slots.get()  # free whenever a credit is: runs end before results are consumed
        try:
            pieces = self._pieces(slot, tensors)
        except BaseException:
            self._slots.put(slot)
            self.consumed()
            raise
        wide = self.wide_session is not None and len(pieces) == 1 and self.pool is not None and self.pool.is_idle()
        job = _Job(slot, pieces, done, context, results=[None] * len(pieces), remaining=len(pieces), wide=wide)
        self.stats.submitted()
        if self.plan.mode == "async":
            for idx, piece in enumerate(pieces):
                self.session.run_async(self.output_names, {self.input_name: piece.buffer}, self._on_async, (job, idx))
        else:
            assert self.pool is not None
            self.pool.put(lambda: self._execute(job), self.priority)

    def infer(self, tensors: list[Input]) -> Chunks:
        """Synchronous run of one batch (tests, the benchmark, start-up checks)."""
        out: list = []
        event = threading.Event()

        def done(chunks: Chunks | None, err: BaseException | None, _: object) -> None:
            out.append((chunks, err))
            event.set()

        self.submit(tensors, done)
        event.wait()
        self.consumed()
        chunks, err = out[0]
        if err is not None:
            raise err
        assert chunks is not None
        return chunks

    def consumed(self) -> None:
        """The consumer has taken one result off its hand-over queue: one more batch may go."""
        with self._cond:
            self._inflight -= 1
            self._cond.notify_all()

    # -- execution ----------------------------------------------------------------------
    def _on_async(self, outputs: list, user_data: tuple, err: str) -> None:
        job, idx = user_data
        self._piece_done(job, idx, outputs, RuntimeError(err) if err else None)

    def _execute(self, job: _Job) -> None:
        for idx, piece in enumerate(job.pieces):
            try:
                outputs = self._run(piece, job.wide)
                self._piece_done(job, idx, outputs, None)
            except BaseException as e:  # reported to the caller through `done`
                self._piece_done(job, idx, None, e)

    def _run(self, piece: _Piece, wide: bool = False) -> list[np.ndarray]:
        session = self.wide_session if wide and self.wide_session is not None else self.session
        if not self.model.engine.io_binding:
            return session.run(self.output_names, {self.input_name: piece.buffer})
        key = (wide, *piece.key)
        binding = self._bindings.get(key)
        if binding is None:
            binding = self._bindings[key] = self._bind(key, piece.buffer, session)
        own = self._own_outputs.get(key)
        if own is not None:
            # ORT writes straight into arrays of this run's own, handed over as they are: no
            # copy afterwards (a copy would hold the GIL the other threads need), and a result
            # stays valid however long its consumer keeps it
            arrays = [np.empty(shape, np.float32) for _, shape in own]
            for (name, shape), array in zip(own, arrays):
                binding.bind_output(name, "cpu", 0, np.float32, shape, array.ctypes.data)
            session.run_with_iobinding(binding)
            return arrays
        if self.on_gpu:
            self._device_inputs[key].update_inplace(piece.buffer)  # host -> device into the bound buffer
        if self._dynamic_outputs[key]:
            # an output whose shape depends on the data (NMS inside: one row per box) must be
            # allocated by each run: a binding kept from the last run holds the last shape
            self._bind_outputs(key, binding, fresh=True)
        run_options = None  # a RunOptions costs ORT a Python exception per run when it has no graph id
        if self.on_gpu and self.model.engine.cuda_graph:
            # one captured graph per bound buffer set (slot x padded batch size): a graph
            # replays fixed addresses, so each binding needs its own
            run_options = ort.RunOptions()
            graph_id = self._graph_ids.setdefault(key, len(self._graph_ids))
            run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        session.run_with_iobinding(binding, run_options)
        return binding.copy_outputs_to_cpu()

    def _bind(self, key: tuple, buf: np.ndarray, session: ort.InferenceSession):
        """IOBinding on buffers allocated once: the input is the slot's own array (CPU) or a
        device copy of it updated in place (CUDA). On a GPU, outputs whose shape is fixed
        once the batch is known are preallocated too (fixed addresses are what CUDA graph
        replay requires); the others are bound afresh before every run. On a CPU, when every
        output's shape is fixed, each run writes into new arrays of its own (`_run`)."""
        binding = session.io_binding()
        device_id = self.model.engine.device_id
        if self.on_gpu:
            dev = ort.OrtValue.ortvalue_from_shape_and_type(list(buf.shape), np.float32, self.device, device_id)
            self._device_inputs[key] = dev
            binding.bind_ortvalue_input(self.input_name, dev)
        else:
            binding.bind_cpu_input(self.input_name, buf)
        dynamic = []
        fixed = {}
        batch_dim = self.session.get_inputs()[0].shape[0]  # the symbol (or number) of the batch dimension
        for out in (o for o in self.session.get_outputs() if o.name in self.output_names):
            shape = [buf.shape[0] if i == 0 and d == batch_dim else d for i, d in enumerate(out.shape)]
            if all(isinstance(d, int) and d > 0 for d in shape) and out.type == "tensor(float)":
                fixed[out.name] = shape
            else:
                dynamic.append(out.name)
        self._dynamic_outputs[key] = dynamic
        if not self.on_gpu and not dynamic:
            self._own_outputs[key] = [(name, fixed[name]) for name in self.output_names]
            return binding
        for name, shape in fixed.items():
            self._bound_outputs[(key, name)] = ort.OrtValue.ortvalue_from_shape_and_type(
                shape, np.float32, self.device, device_id)
        self._bind_outputs(key, binding, fresh=False)
        return binding

    def _bind_outputs(self, key: tuple, binding, fresh: bool) -> None:
        """Bind the outputs in order: preallocated ones to their buffers, the others to be
        allocated by the run."""
        if fresh:
            binding.clear_binding_outputs()
        for name in self.output_names:
            value = self._bound_outputs.get((key, name))
            if value is not None:
                binding.bind_ortvalue_output(name, value)
            else:
                binding.bind_output(name, self.device, self.model.engine.device_id)

    def _piece_done(self, job: _Job, idx: int, outputs: list | None, err: BaseException | None) -> None:
        with job.lock:
            if err is not None and job.error is None:
                job.error = err
            else:
                job.results[idx] = (job.pieces[idx].count, outputs)
            job.remaining -= 1
            finished = job.remaining == 0
        if not finished:
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
