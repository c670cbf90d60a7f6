"""Read-only tensor sources: HF safetensors (single file or sharded index), memory-mapped.

A source exposes `names()` and `get(hf_name) -> np.ndarray` (HF layout, native dtype, read lazily
from a memory map so only the tensors asked for are touched). The GGUF source lives in
`reasoner.models.gguf`. Problems raise `CheckpointError` naming the file and tensor.
"""

from __future__ import annotations

import json
import os
import struct

import ml_dtypes
import numpy as np

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, or holds a tensor we cannot use."""


def _check_entry(path: str, name: str, h) -> None:
    """One header entry: dtype, shape and data_offsets present and consistent (a tensor whose bytes do not fill its
    shape failed later as a bare numpy reshape error naming neither the file nor the tensor)."""
    if not isinstance(h, dict) or not {"dtype", "shape", "data_offsets"} <= set(h):
        raise CheckpointError(f"checkpoint file {path}: tensor {name!r} has no dtype, shape and data_offsets")
    shape, offsets = h["shape"], h["data_offsets"]
    if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
            or not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets) or not 0 <= offsets[0] <= offsets[1]):
        raise CheckpointError(f"checkpoint file {path}: tensor {name!r} has shape {shape!r} and data_offsets "
                              f"{offsets!r}; expected non-negative ints and begin <= end")
    if h["dtype"] in _DTYPES:
        need = int(np.prod(shape)) * np.dtype(_DTYPES[h["dtype"]]).itemsize
        if offsets[1] - offsets[0] != need:
            raise CheckpointError(f"checkpoint file {path}: tensor {name!r} ({h['dtype']} {shape}) needs {need} "
                                  f"bytes, its data_offsets hold {offsets[1] - offsets[0]}")


class SafetensorsFile:
    """One `.safetensors` file parsed by hand so bf16 maps to numpy via ml_dtypes without copies."""

    def __init__(self, path: str):
        self.path = path
        if not os.path.isfile(path):
            raise CheckpointError(f"checkpoint file {path} does not exist")
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"checkpoint file {path} is truncated: {size} bytes, no safetensors header")
            (n,) = struct.unpack("<Q", head)
            if 8 + n > size:
                raise CheckpointError(f"checkpoint file {path} is truncated: header needs {8 + n} bytes, file has {size}")
            try:
                header = json.loads(f.read(n))
            except ValueError as err:
                raise CheckpointError(f"checkpoint file {path}: safetensors header is not valid JSON ({err})") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"checkpoint file {path}: safetensors header is {type(header).__name__}, expected "
                                  f"an object of tensors")
        header.pop("__metadata__", None)
        for name, h in header.items():
            _check_entry(path, name, h)
        self.header, self.data_start = header, 8 + n
        end = max((h["data_offsets"][1] for h in header.values()), default=0)
        if self.data_start + end > size:
            worst = max(header, key=lambda k: header[k]["data_offsets"][1])
            raise CheckpointError(
                f"checkpoint file {path} is truncated: tensor {worst!r} needs bytes up to {self.data_start + end}, "
                f"file has {size}"
            )
        self._map = np.memmap(path, dtype=np.uint8, mode="r") if size > 0 else None

    def names(self) -> list[str]:
        return list(self.header)

    def get(self, name: str) -> np.ndarray:
        h = self.header[name]
        if h["dtype"] not in _DTYPES:
            raise CheckpointError(f"{self.path}: tensor {name!r} has unsupported dtype {h['dtype']}")
        begin, end = h["data_offsets"]
        raw = self._map[self.data_start + begin:self.data_start + end]
        return raw.view(_DTYPES[h["dtype"]]).reshape(h["shape"])


class SafetensorsSource:
    """All tensors of an HF checkpoint directory: `model.safetensors` or the sharded index."""

    def __init__(self, directory: str):
        self.directory = directory
        index = os.path.join(directory, "model.safetensors.index.json")
        single = os.path.join(directory, "model.safetensors")
        self.files: dict[str, SafetensorsFile] = {}
        self.where: dict[str, str] = {}
        if os.path.isfile(single):  # transformers' order: the single file first
            self.files["model.safetensors"] = SafetensorsFile(single)
            self.where = {n: "model.safetensors" for n in self.files["model.safetensors"].names()}
        elif os.path.isfile(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            for fname in sorted(set(weight_map.values())):
                self.files[fname] = SafetensorsFile(os.path.join(directory, fname))
            for name, fname in weight_map.items():
                if name not in self.files[fname].header:
                    raise CheckpointError(f"{index} lists tensor {name!r} in {fname}, which does not contain it")
                self.where[name] = fname
        else:
            raise CheckpointError(f"{directory}: no model.safetensors or model.safetensors.index.json found")

    def describe(self, name: str) -> str:
        return os.path.join(self.directory, self.where.get(name, "?"))

    def names(self) -> list[str]:
        return list(self.where)

    def get(self, name: str) -> np.ndarray:
        return self.files[self.where[name]].get(name)
