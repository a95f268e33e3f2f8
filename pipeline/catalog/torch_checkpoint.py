"""Read a PyTorch checkpoint's tensors as numpy arrays, without PyTorch.

A published model is often a `.pth` file only; installing PyTorch (hundreds of MB) to turn
a few MB of weights into an ONNX graph is no first step for a user. A checkpoint is a
pickle whose tensors point at raw little-endian storages, in one of two layouts:
- the zip layout (PyTorch >= 1.6): `<root>/data.pkl` plus one member `<root>/data/<key>`
  per storage;
- the legacy layout: consecutive pickles (magic number, protocol, system info, the
  object, the list of storage keys), then each storage as an int64 element count followed
  by its bytes.

Only the names a state dict needs are resolved while unpickling (tensors, storages,
`OrderedDict`): anything else in the file is refused, so reading an untrusted checkpoint
runs no code from it.
"""
from __future__ import annotations

import collections
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16, "CharStorage": np.int8,
    "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class CheckpointError(ValueError):
    """The file is not a checkpoint this reader understands (what it found is in the message)."""


@dataclass
class _Storage:
    """One storage: its element type, filled in once its bytes are read."""

    dtype: np.dtype
    data: np.ndarray | None = None


@dataclass
class _TensorRef:
    """A tensor as the pickle describes it: a view of a storage."""

    storage: _Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    def array(self) -> np.ndarray:
        assert self.storage.data is not None, "storage never read"
        base = self.storage.data
        item = base.itemsize
        if not self.shape:
            return base[self.offset].copy()
        view = np.lib.stride_tricks.as_strided(base[self.offset:], shape=self.shape,
                                               strides=[s * item for s in self.stride])
        return np.ascontiguousarray(view)


def _rebuild_tensor(storage: _Storage, offset: int, size: tuple, stride: tuple, *_: Any) -> _TensorRef:
    return _TensorRef(storage, offset, tuple(size), tuple(stride))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], storages: dict[str, _Storage]):
        super().__init__(file)
        self.storages = storages

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in ("_rebuild_tensor", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return np.dtype(_STORAGE_DTYPES[name])
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        raise CheckpointError(f"refused to load {module}.{name}: not part of a state dict")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise CheckpointError(f"unexpected persistent id {pid!r}")
        dtype, key = pid[1], str(pid[2])
        if not isinstance(dtype, np.dtype):
            raise CheckpointError(f"storage {key}: unknown type {dtype!r}")
        return self.storages.setdefault(key, _Storage(dtype))


def read_state_dict(path: Path) -> dict[str, np.ndarray]:
    """The checkpoint's tensors by name (a `state_dict`, or one under a `state_dict` key)."""
    storages: dict[str, _Storage] = {}
    obj = _read_zip(path, storages) if zipfile.is_zipfile(path) else _read_legacy(path, storages)
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path.name}: holds a {type(obj).__name__}, not a state dict")
    return {k: v.array() for k, v in obj.items() if isinstance(v, _TensorRef)}


def _read_zip(path: Path, storages: dict[str, _Storage]) -> Any:
    with zipfile.ZipFile(path) as z:
        pkl = next((n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pkl is None:
            raise CheckpointError(f"{path.name}: a zip without data.pkl")
        root = pkl[: -len("data.pkl")]
        with z.open(pkl) as f:
            obj = _Unpickler(f, storages).load()
        for key, storage in storages.items():
            storage.data = np.frombuffer(z.read(f"{root}data/{key}"), dtype=storage.dtype.newbyteorder("<"))
    return obj


def _read_legacy(path: Path, storages: dict[str, _Storage]) -> Any:
    with open(path, "rb") as f:
        try:
            magic = pickle.load(f)
        except Exception as e:
            raise CheckpointError(f"{path.name}: not a PyTorch checkpoint ({e})") from None
        if magic != LEGACY_MAGIC:
            raise CheckpointError(f"{path.name}: not a PyTorch checkpoint (magic {magic!r})")
        pickle.load(f)  # protocol version
        pickle.load(f)  # system info (byte order, sizes)
        obj = _Unpickler(f, storages).load()
        for key in pickle.load(f):
            storage = storages[str(key)]
            (count,) = struct.unpack("<q", f.read(8))
            size = count * storage.dtype.itemsize
            raw = f.read(size)
            if len(raw) != size:
                raise CheckpointError(f"{path.name}: storage {key} is cut short ({len(raw)} of {size} bytes)")
            storage.data = np.frombuffer(raw, dtype=storage.dtype.newbyteorder("<"))
    return obj
