"""One model, one ONNX Runtime session, asynchronous submission.

`submit()` returns as soon as the batch is handed over; at most `max_inflight` batches
are in flight (submit blocks beyond that: that is the backpressure). Completion runs the
caller's `done` callback on an engine thread, and that callback must only hand the
result on (a queue put), never do work: this is the seed design's rule. A batch counts
as in flight until its consumer calls `consumed()` after taking the result, so the
hand-over queue never holds more than `max_inflight` results and the callback never
blocks: inference threads shared between engines can then never wait on each other.

Two ways to run a batch:
- `async`: `InferenceSession.run_async`; the model runs on ORT's own intra-op pool and
  calls back from there. ORT refuses it with `intra_op_num_threads=1`.
- `thread`: dispatcher threads (a `WorkerPool`, shared by all CPU engines) call
  `run_with_iobinding` (or `run`) on preallocated buffers. On CPU, N single-threaded
  concurrent runs use N cores with no intra-op synchronisation, which measured faster
  here than one run over N intra-op threads; on CUDA one worker drives the session on
  its own stream.
`auto` picks `thread`. Both keep the same interface, so callers do not change.

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
from pipeline.engines.session import GPU_PROVIDERS, ModelError, create_session, requested_providers
from pipeline.metrics.registry import EngineStats
from pipeline.stages.preprocess import ModelInput

log = logging.getLogger("pipeline.engine")

Chunks = list[tuple[int, list[np.ndarray]]]
Input = np.ndarray | ModelInput  # [3, H, W] float32, or a picture normalised on the way in
DoneCallback = Callable[[Chunks | None, BaseException | None, object], None]


@dataclass
class _Job:
    slot: int
    pieces: list[tuple[int, np.ndarray, tuple]]  # (real items, padded input, buffer key)
    done: DoneCallback
    context: object
    started: float = field(default_factory=time.perf_counter)
    results: list = field(default_factory=list)
    remaining: int = 0
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class Engine:
    def __init__(self, model: ModelConfig, stats: EngineStats, intra_op_threads: int = 1, workers: int = 1,
                 pool: WorkerPool | None = None, session: ort.InferenceSession | None = None):
        self.model = model
        self.stats = stats
        mode = model.engine.mode
        if mode == "auto":
            mode = "thread"
        if mode == "async" and intra_op_threads < 2:
            intra_op_threads = 2  # ORT refuses run_async with a single intra-op thread
        self.mode = mode
        self.intra_op_threads = intra_op_threads
        self.session = session or create_session(model, intra_op_threads, model.engine.inter_op_threads)
        self.providers = self.session.get_providers()
        self.on_gpu = self.providers[0] in GPU_PROVIDERS
        self.device = "cuda" if self.on_gpu else "cpu"  # where device-side buffers live
        stats.provider = self.providers[0]
        inp = self.session.get_inputs()[0]
        self.input_name = inp.name
        self.output_names = self._outputs(model)
        self.fixed_batch = inp.shape[0] if isinstance(inp.shape[0], int) and inp.shape[0] > 0 else None
        w, h = model.input_size
        self.item_shape = (3, h, w)
        sizes = model.batching.batch_sizes
        if self.fixed_batch:
            sizes = [self.fixed_batch]
        self.batch_sizes = sizes  # None: any size
        self._own_pool = mode == "thread" and pool is None
        self.pool = pool if pool is not None or mode != "thread" else WorkerPool(f"engine-{model.name}", workers)
        self.workers = self.pool.size if self.pool else 0
        # One batch more than there are workers: a finishing worker finds the next batch
        # already prepared instead of waiting for the batcher (measured +8% on CPU).
        self.max_inflight = model.engine.max_inflight or (self.workers + 1 if mode == "thread" else 2)
        self._credits = threading.Semaphore(self.max_inflight)
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(self.max_inflight):
            self._slots.put(i)
        self._buffers: dict[tuple, np.ndarray] = {}
        self._bindings: dict[tuple, object] = {}
        self._device_inputs: dict[tuple, ort.OrtValue] = {}
        self._device_outputs: dict[tuple, ort.OrtValue] = {}
        self._graph_ids: dict[tuple, int] = {}
        self.stats_lock = threading.Lock()
        self._closed = False

    def _outputs(self, model: ModelConfig) -> list[str]:
        """The outputs to fetch: all, or only the configured one (ORT then skips the rest)."""
        names = [o.name for o in self.session.get_outputs()]
        if model.output is None:
            return names
        if isinstance(model.output, int):
            if not 0 <= model.output < len(names):
                raise ModelError(f"models.{model.name}.output: index {model.output} out of range; outputs: {names}")
            return [names[model.output]]
        if model.output not in names:
            raise ModelError(f"models.{model.name}.output: no output {model.output!r}; outputs: {names}")
        return [model.output]

    def describe(self) -> str:
        wanted = requested_providers(self.model)
        note = ""
        if wanted[0] != self.providers[0]:
            note = f" ({wanted[0]} asked for but not available here)"
        batch = f"fixed batch {self.fixed_batch} (batches are split)" if self.fixed_batch else "dynamic batch"
        how = (f"run_async on ORT's pool, intra_op={self.intra_op_threads}" if self.mode == "async"
               else f"{self.workers} worker(s){'' if self._own_pool else ' shared'}, intra_op={self.intra_op_threads}, "
                    f"io_binding={'on' if self.model.engine.io_binding else 'off'}")
        graph = ", CUDA graphs" if self.on_gpu and self.model.engine.cuda_graph else ""
        return f"model {self.model.name}: {self.providers[0]}{note}; {batch}; {how}{graph}"

    # -- submission ---------------------------------------------------------------------
    def padded_size(self, n: int) -> int:
        if not self.batch_sizes:
            return n
        for s in self.batch_sizes:
            if s >= n:
                return s
        return self.batch_sizes[-1]

    def _pieces(self, slot: int, tensors: list[Input]) -> list[tuple[int, np.ndarray, tuple]]:
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
            pieces.append((len(part), buf, key))
        return pieces

    def submit(self, tensors: list[Input], done: DoneCallback, context: object = None) -> None:
        """Hand over one batch; blocks only while `max_inflight` batches are already in flight."""
        if self._closed:
            raise RuntimeError(f"engine {self.model.name} is closed")
        self._credits.acquire()
        slot = self._slots.get()  # free whenever a credit is: runs end before results are consumed
        try:
            pieces = self._pieces(slot, tensors)
        except BaseException:
            self._slots.put(slot)
            self._credits.release()
            raise
        job = _Job(slot, pieces, done, context, remaining=len(pieces))
        job.results = [None] * len(pieces)
        with self.stats_lock:
            self.stats.inflight += 1
            self.stats.max_inflight_seen = max(self.stats.max_inflight_seen, self.stats.inflight)
        if self.mode == "async":
            for idx, (_, buf, _key) in enumerate(pieces):
                self.session.run_async(self.output_names, {self.input_name: buf}, self._on_async, (job, idx))
        else:
            assert self.pool is not None
            self.pool.put(lambda: self._execute(job))

    def infer(self, tensors: list[Input]) -> Chunks:
        """Synchronous run of one batch (tests, the benchmark's limit, warm-up)."""
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
        self._credits.release()

    # -- execution ----------------------------------------------------------------------
    def _on_async(self, outputs: list, user_data: tuple, err: str) -> None:
        job, idx = user_data
        self._piece_done(job, idx, outputs, RuntimeError(err) if err else None)

    def _execute(self, job: _Job) -> None:
        for idx, (_, buf, key) in enumerate(job.pieces):
            try:
                outputs = self._run(key, buf)
                self._piece_done(job, idx, outputs, None)
            except BaseException as e:  # reported to the caller through `done`
                self._piece_done(job, idx, None, e)

    def _run(self, key: tuple, buf: np.ndarray) -> list[np.ndarray]:
        if not self.model.engine.io_binding:
            return self.session.run(self.output_names, {self.input_name: buf})
        binding = self._bindings.get(key)
        if binding is None:
            binding = self._bindings[key] = self._bind(key, buf)
        if self.on_gpu:
            self._device_inputs[key].update_inplace(buf)  # host -> device into the bound buffer
        run_options = None  # a RunOptions costs ORT a Python exception per run when it has no graph id
        if self.on_gpu and self.model.engine.cuda_graph:
            # one captured graph per bound buffer set (slot x padded batch size): a graph
            # replays fixed addresses, so each binding needs its own
            run_options = ort.RunOptions()
            graph_id = self._graph_ids.setdefault(key, len(self._graph_ids))
            run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        self.session.run_with_iobinding(binding, run_options)
        return binding.copy_outputs_to_cpu()

    def _bind(self, key: tuple, buf: np.ndarray):
        """IOBinding on buffers allocated once: the input is the slot's own array (CPU) or a
        device copy of it updated in place (CUDA). On CUDA, outputs whose shape is static
        once the batch is known are preallocated on the device too: fixed addresses are
        what CUDA graph replay requires."""
        binding = self.session.io_binding()
        if self.on_gpu:
            device_id = self.model.engine.device_id
            dev = ort.OrtValue.ortvalue_from_shape_and_type(list(buf.shape), np.float32, self.device, device_id)
            self._device_inputs[key] = dev
            binding.bind_ortvalue_input(self.input_name, dev)
            for out in (o for o in self.session.get_outputs() if o.name in self.output_names):
                shape = [buf.shape[0] if i == 0 and not isinstance(d, int) else d for i, d in enumerate(out.shape)]
                if all(isinstance(d, int) and d > 0 for d in shape) and out.type == "tensor(float)":
                    value = ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, self.device, device_id)
                    self._device_outputs[(key, out.name)] = value
                    binding.bind_ortvalue_output(out.name, value)
                else:
                    binding.bind_output(out.name, self.device, device_id)
        else:
            binding.bind_cpu_input(self.input_name, buf)
            for name in self.output_names:
                binding.bind_output(name, "cpu")
        return binding

    def _piece_done(self, job: _Job, idx: int, outputs: list | None, err: BaseException | None) -> None:
        with job.lock:
            if err is not None and job.error is None:
                job.error = err
            else:
                job.results[idx] = (job.pieces[idx][0], outputs)
            job.remaining -= 1
            finished = job.remaining == 0
        if not finished:
            return
        elapsed = time.perf_counter() - job.started
        n = sum(p[0] for p in job.pieces)
        with self.stats_lock:
            self.stats.inflight -= 1
            self.stats.batches += 1
            self.stats.items += n
            self.stats.batch_sizes[n] += 1
        self.stats.infer.record(elapsed)
        self._slots.put(job.slot)
        try:
            job.done(None if job.error else job.results, job.error, job.context)
        except BaseException:  # a broken callback must not kill an ORT or engine thread
            log.exception("engine %s: completion callback failed", self.model.name)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._own_pool and self.pool is not None:
            self.pool.close()
