"""PyTorch checkpoints read without PyTorch: both file layouts, views into storages, and a
pickle that names anything besides tensors refused before it runs. The files are written
here the way `torch.save` writes them (a stand-in `torch` module only names the globals
the pickle refers to); the real published checkpoint is read in tests/test_catalog.py."""
from __future__ import annotations

import collections
import os
import pickle
import struct
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pipeline.catalog.torch_checkpoint import LEGACY_MAGIC, CheckpointError, read_state_dict


class _StorageRef:
    def __init__(self, key: str, data: np.ndarray):
        self.key, self.data = key, data


@pytest.fixture
def torch_names(monkeypatch):
    """The globals a checkpoint's pickle names (`torch.FloatStorage`, `torch._utils._rebuild_tensor_v2`)."""
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")
    storages = {}
    for name in ("FloatStorage", "LongStorage"):
        storages[name] = type(name, (), {"__module__": "torch", "__qualname__": name})
        setattr(torch, name, storages[name])

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called while writing")

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch._utils = utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return types.SimpleNamespace(rebuild=_rebuild_tensor_v2, storages=storages)


class _Tensor:
    def __init__(self, names, storage: _StorageRef, offset: int, shape: tuple, stride: tuple):
        self.names, self.storage, self.offset, self.shape, self.stride = names, storage, offset, shape, stride

    def __reduce__(self):
        return (self.names.rebuild, (self.storage, self.offset, self.shape, self.stride, False,
                                     collections.OrderedDict()))


def _pickle(obj, names) -> bytes:
    import io

    out = io.BytesIO()

    class Writer(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, _StorageRef):
                kind = "FloatStorage" if o.data.dtype == np.float32 else "LongStorage"
                return ("storage", names.storages[kind], o.key, "cpu", o.data.size)
            return None

    Writer(out, protocol=2).dump(obj)
    return out.getvalue()


def _state(names):
    weights = _StorageRef("0", np.arange(12, dtype=np.float32))
    steps = _StorageRef("1", np.array([7], dtype=np.int64))
    state = collections.OrderedDict(
        conv=_Tensor(names, weights, 0, (3, 4), (4, 1)),
        transposed=_Tensor(names, weights, 2, (2, 3), (1, 2)),  # a strided view at an offset
        steps=_Tensor(names, steps, 0, (), ()))
    return state, (weights, steps)


def _expect(state):
    full = np.arange(12, dtype=np.float32)
    assert state["conv"].tolist() == full.reshape(3, 4).tolist()
    assert state["transposed"].tolist() == [[2, 4, 6], [3, 5, 7]]
    assert state["steps"] == 7 and state["steps"].dtype == np.int64


def test_a_zip_checkpoint_gives_its_tensors_and_their_views(tmp_path, torch_names):
    state, storages = _state(torch_names)
    path = tmp_path / "model.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model/data.pkl", _pickle({"state_dict": state}, torch_names))
        for s in storages:
            z.writestr(f"model/data/{s.key}", s.data.astype(s.data.dtype.newbyteorder("<")).tobytes())
    _expect(read_state_dict(path))


def test_a_legacy_checkpoint_gives_its_tensors_and_their_views(tmp_path, torch_names):
    state, storages = _state(torch_names)
    path = tmp_path / "model.pth"
    with open(path, "wb") as f:
        for header in (LEGACY_MAGIC, 1001, {"little_endian": True}):
            pickle.dump(header, f, protocol=2)
        f.write(_pickle(state, torch_names))
        pickle.dump([s.key for s in storages], f, protocol=2)
        for s in storages:
            f.write(struct.pack("<q", s.data.size) + s.data.tobytes())
    _expect(read_state_dict(path))


def test_a_cut_short_checkpoint_says_so(tmp_path, torch_names):
    state, storages = _state(torch_names)
    path = tmp_path / "model.pth"
    with open(path, "wb") as f:
        for header in (LEGACY_MAGIC, 1001, {}):
            pickle.dump(header, f, protocol=2)
        f.write(_pickle(state, torch_names))
        pickle.dump([s.key for s in storages], f, protocol=2)
        f.write(struct.pack("<q", 12) + b"\0" * 10)
    with pytest.raises(CheckpointError, match="cut short"):
        read_state_dict(path)


def test_a_pickle_naming_anything_else_is_refused_without_running_it(tmp_path):
    path = tmp_path / "evil.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"w": os.getcwd}, protocol=2))
    with pytest.raises(CheckpointError, match="refused to load"):
        read_state_dict(path)


def test_a_file_that_is_no_checkpoint_says_so(tmp_path):
    path = tmp_path / "notes.pth"
    path.write_bytes(b"not a pickle at all")
    with pytest.raises(CheckpointError, match="not a PyTorch checkpoint"):
        read_state_dict(Path(path))
