"""Running one piece of a batch on a session: plainly, or with IOBinding on buffers bound
once per (session, slot, offset, padded size), on the host or on a GPU.

- `run_plain`: `session.run` on the piece's buffer (ORT allocates the outputs).
- `HostBinder`: the input is the piece's own array. When every output's shape is fixed
  once the batch is known, each run writes into fresh arrays handed over as they are (no
  copy afterwards: a copy would hold the GIL the other threads need, and a result stays
  valid however long its consumer keeps it); otherwise outputs of fixed shape are
  preallocated and the others (NMS inside: one row per box) are allocated by each run.
- `DeviceBinder` (CUDA): a device copy of the input is updated in place before every run
  and ordered before the compute (`synchronize_inputs`); every output is preallocated on
  the device where its shape allows. With CUDA graphs each bound buffer set gets its own
  graph (a graph replays fixed addresses), numbered from 1: id 0 is ORT's default, which
  any plain run on the session would capture on ORT's own buffers.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from pipeline.engines.batching import Piece
from pipeline.engines.session import ModelError

NO_GRAPH = "-1"  # gpu_graph_id for a run that must neither capture nor replay a graph


def no_graph() -> ort.RunOptions:
    """Run options for a plain run on a session with CUDA graphs enabled, which would
    otherwise capture graph 0 on ORT's own buffers."""
    options = ort.RunOptions()
    options.add_run_config_entry("gpu_graph_id", NO_GRAPH)
    return options


def run_plain(session: ort.InferenceSession, output_names: list[str], input_name: str, piece: Piece,
              graphs: bool = False) -> list[np.ndarray]:
    return session.run(output_names, {input_name: piece.buffer}, no_graph() if graphs else None)


def output_shapes(session: ort.InferenceSession, names: list[str], batch: int) -> tuple[dict[str, list[int]], list[str]]:
    """The outputs whose shape is known once the batch size is (name -> shape), and the
    others (their shape depends on the data)."""
    batch_dim = session.get_inputs()[0].shape[0]  # the symbol (or number) of the batch dimension
    fixed: dict[str, list[int]] = {}
    dynamic: list[str] = []
    for out in (o for o in session.get_outputs() if o.name in names):
        shape = [batch if i == 0 and d == batch_dim else d for i, d in enumerate(out.shape)]
        if all(isinstance(d, int) and d > 0 for d in shape) and out.type == "tensor(float)":
            fixed[out.name] = shape
        else:
            dynamic.append(out.name)
    return fixed, dynamic


class GraphIds:
    """One CUDA graph per bound buffer set, numbered from 1."""

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}

    def of(self, key: tuple) -> int:
        return self._ids.setdefault(key, len(self._ids) + 1)

    def __len__(self) -> int:
        return len(self._ids)


class HostBinder:
    def __init__(self, input_name: str, output_names: list[str]):
        self.input_name = input_name
        self.output_names = output_names
        self._bindings: dict[tuple, Any] = {}
        self._own: dict[tuple, list[tuple[str, list[int]]]] = {}   # outputs each run writes afresh
        self._kept: dict[tuple, dict[str, ort.OrtValue]] = {}       # preallocated, alive with their binding

    def run(self, session: ort.InferenceSession, key: tuple, piece: Piece) -> list[np.ndarray]:
        binding = self._bindings.get(key)
        if binding is None:
            binding = self._bindings[key] = self._bind(session, key, piece.buffer)
        own = self._own.get(key)
        if own is not None:
            arrays = [np.empty(shape, np.float32) for _, shape in own]
            for (name, shape), array in zip(own, arrays):
                binding.bind_output(name, "cpu", 0, np.float32, shape, array.ctypes.data)
            session.run_with_iobinding(binding)
            return arrays
        rebind_outputs(binding, self.output_names, self._kept[key], "cpu", 0)
        session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()

    def _bind(self, session: ort.InferenceSession, key: tuple, buf: np.ndarray):
        binding = session.io_binding()
        binding.bind_cpu_input(self.input_name, buf)
        fixed, dynamic = output_shapes(session, self.output_names, buf.shape[0])
        if not dynamic:
            self._own[key] = [(name, fixed[name]) for name in self.output_names]
        else:
            self._kept[key] = {name: ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cpu", 0)
                               for name, shape in fixed.items()}
        return binding


def rebind_outputs(binding, names: list[str], kept: dict[str, ort.OrtValue], device: str, device_id: int) -> None:
    """Bind the outputs in order: preallocated ones to their buffers, the others to be
    allocated by the run (a binding kept from the last run would hold the last shape)."""
    binding.clear_binding_outputs()
    for name in names:
        value = kept.get(name)
        if value is not None:
            binding.bind_ortvalue_output(name, value)
        else:
            binding.bind_output(name, device, device_id)


class DeviceBinder:
    def __init__(self, model_name: str, input_name: str, output_names: list[str], device_id: int, graphs: bool,
                 device: str = "cuda"):
        self.model_name = model_name
        self.device = device  # "cpu" only where a test stands in host memory for the GPU
        self.input_name = input_name
        self.output_names = output_names
        self.device_id = device_id
        self.graphs = GraphIds() if graphs else None
        self._bindings: dict[tuple, Any] = {}
        self._inputs: dict[tuple, ort.OrtValue] = {}
        self._kept: dict[tuple, dict[str, ort.OrtValue]] = {}
        self._dynamic: dict[tuple, bool] = {}

    def run(self, session: ort.InferenceSession, key: tuple, piece: Piece) -> list[np.ndarray]:
        binding = self._bindings.get(key)
        if binding is None:
            binding = self._bindings[key] = self._bind(session, key, piece.buffer)
        self._inputs[key].update_inplace(piece.buffer)  # host -> device, into the bound buffer
        binding.synchronize_inputs()  # the copy is done before the compute stream reads it
        if self._dynamic[key]:
            rebind_outputs(binding, self.output_names, self._kept[key], self.device, self.device_id)
        options = None  # a RunOptions costs ORT a Python exception per run when it has no graph id
        if self.graphs is not None:
            options = ort.RunOptions()
            options.add_run_config_entry("gpu_graph_id", str(self.graphs.of(key)))
        session.run_with_iobinding(binding, options)
        return binding.copy_outputs_to_cpu()

    def _bind(self, session: ort.InferenceSession, key: tuple, buf: np.ndarray):
        binding = session.io_binding()
        value = ort.OrtValue.ortvalue_from_shape_and_type(list(buf.shape), np.float32, self.device, self.device_id)
        self._inputs[key] = value
        binding.bind_ortvalue_input(self.input_name, value)
        fixed, dynamic = output_shapes(session, self.output_names, buf.shape[0])
        if dynamic and self.graphs is not None:
            raise ModelError(f"models.{self.model_name}.engine.cuda_graph: output(s) {', '.join(dynamic)} change "
                             f"shape with the data (or are not float32): a graph replay would write to freed memory")
        self._dynamic[key] = bool(dynamic)
        self._kept[key] = {name: ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, self.device,
                                                                           self.device_id)
                           for name, shape in fixed.items()}
        rebind_outputs(binding, self.output_names, self._kept[key], self.device, self.device_id)
        return binding
