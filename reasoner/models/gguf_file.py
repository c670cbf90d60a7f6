"""A fast reader for the GGUF container (v2/v3): metadata, tensor table, memory-mapped data.

`gguf.GGUFReader` builds a numpy view for every token string of the vocabulary (about 15 s for
SmolLM2's 49k tokens and merges on a busy CPU); this reader walks the header with `struct` on
one bytes buffer instead, keeps string arrays as their length only, and maps tensor data lazily.
Dequantization stays with the `gguf` package.

`GGUFFile(path).metadata` -> {key: value} (string arrays become `StringArray(count)`),
`.tensors` -> {name: TensorInfo}, `.raw(name)` -> the tensor's bytes/values as numpy (float32 /
float16 arrays for F32/F16, uint8 rows for quantized types), shaped [rows..., row_items].
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import os
import struct

import numpy as np

from reasoner.models.sources import CheckpointError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
MAX_ARRAY_NESTING = 16  # arrays of arrays deeper than this are refused (a header is data, not a program)
MAX_DIMS = 4  # GGML_MAX_DIMS
LIST_MAX_ITEMS = 4096  # numeric arrays longer than this stay a read-only numpy view of the mapped file


@dataclasses.dataclass(frozen=True)
class StringArray:
    count: int

    def __len__(self) -> int:
        return self.count


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # GGUF order: dims[0] is the fastest-varying (row length)
    type_id: int
    offset: int  # from the start of the data section

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy (row-major) shape of the dequantized tensor."""
        return tuple(reversed(self.dims))


class _Cursor:
    def __init__(self, buf, path):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise CheckpointError(f"checkpoint file {self.path} is truncated inside the GGUF header "
                                  f"(at byte {self.pos}, file has {len(self.buf)})")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, decode: bool = True):
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            raise CheckpointError(f"checkpoint file {self.path} is truncated inside the GGUF header")
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(raw).decode("utf-8", errors="replace") if decode else None

    def value(self, type_id: int, depth: int = 0):
        """One metadata value; loops over arrays (no recursion but for arrays of arrays, bounded)."""
        if type_id in _SCALARS:
            return self.take(_SCALARS[type_id])
        if type_id == _STRING:
            return self.string()
        if type_id == _ARRAY:
            if depth >= MAX_ARRAY_NESTING:
                raise CheckpointError(f"checkpoint file {self.path}: GGUF metadata arrays nested deeper than "
                                      f"{MAX_ARRAY_NESTING} at byte {self.pos}")
            item_type, count = self.take("<I"), self.take("<Q")
            if item_type == _STRING:
                for _ in range(count):
                    self.string(decode=False)
                return StringArray(count)
            if item_type in _SCALARS:
                fmt = _SCALARS[item_type]
                size = struct.calcsize(fmt)
                if self.pos + size * count > len(self.buf):
                    raise CheckpointError(f"checkpoint file {self.path} is truncated inside the GGUF header")
                if count > LIST_MAX_ITEMS:  # e.g. a 50 MB array: a view of the mapped file, not 1 GB of ints
                    values = np.frombuffer(self.buf, dtype=np.dtype(fmt), count=count, offset=self.pos)
                else:
                    values = list(struct.unpack_from(f"<{count}{fmt[1]}", self.buf, self.pos))
                self.pos += size * count
                return values
            if count > len(self.buf) - self.pos:  # every item takes at least one byte
                raise CheckpointError(f"checkpoint file {self.path} is truncated inside the GGUF header")
            return [self.value(item_type, depth + 1) for _ in range(count)]
        raise CheckpointError(f"checkpoint file {self.path}: unknown GGUF value type {type_id} at byte {self.pos}")


class GGUFFile:
    def __init__(self, path: str):
        import gguf

        self.path = path
        if os.path.isdir(path):
            raise CheckpointError(f"checkpoint file {path} is a directory, expected a GGUF file")
        if not os.path.isfile(path):
            raise CheckpointError(f"checkpoint file {path} does not exist")
        self.size = os.path.getsize(path)
        if self.size < 24:
            raise CheckpointError(f"checkpoint file {path} ({self.size} bytes) is truncated: no GGUF header")
        with open(path, "rb") as f:
            self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        cur = _Cursor(memoryview(self._mmap), path)
        if cur.take("<I") != 0x46554747:  # b"GGUF" little-endian
            raise CheckpointError(f"checkpoint file {path} is not a GGUF file (bad magic)")
        version = cur.take("<I")
        if version not in (2, 3):
            raise CheckpointError(f"checkpoint file {path}: GGUF version {version}; expected 2 or 3")
        n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
        self.metadata = {}
        for _ in range(n_kv):
            key = cur.string()
            self.metadata[key] = cur.value(cur.take("<I"))
        self.tensors: dict[str, TensorInfo] = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.take("<I")
            if not 1 <= n_dims <= MAX_DIMS:
                raise CheckpointError(f"checkpoint file {path}: tensor {name} has {n_dims} dimensions, "
                                      f"expected 1 to {MAX_DIMS}")
            dims = tuple(cur.take("<Q") for _ in range(n_dims))
            self.tensors[name] = TensorInfo(name, dims, cur.take("<I"), cur.take("<Q"))
        alignment = self.metadata.get("general.alignment", 32)
        if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 or alignment % 8:
            raise CheckpointError(f"checkpoint file {path}: general.alignment is {alignment!r}, expected a "
                                  f"positive integer multiple of 8")
        self.data_start = (cur.pos + alignment - 1) // alignment * alignment
        self._sizes = gguf.GGML_QUANT_SIZES
        for t in self.tensors.values():
            end = self.data_start + t.offset + self.nbytes(t)
            if end > self.size:
                raise CheckpointError(f"checkpoint file {path} is truncated: tensor {t.name} needs bytes up to "
                                      f"{end}, file has {self.size}")

    def type_name(self, t: TensorInfo) -> str:
        import gguf

        try:
            return gguf.GGMLQuantizationType(t.type_id).name
        except ValueError:
            return f"type {t.type_id}"

    def nbytes(self, t: TensorInfo) -> int:
        import gguf

        try:
            block, type_size = self._sizes[gguf.GGMLQuantizationType(t.type_id)]
        except (ValueError, KeyError):
            raise CheckpointError(f"{self.path}: tensor {t.name} has unknown GGUF type id {t.type_id}") from None
        if t.dims[0] % block:
            raise CheckpointError(f"{self.path}: tensor {t.name} has rows of {t.dims[0]} items, not a multiple "
                                  f"of its type's block of {block}")
        return math.prod(t.dims) // block * type_size  # Python ints: a product of huge dims cannot wrap to 0

    def raw(self, name: str) -> np.ndarray:
        import gguf

        t = self.tensors[name]
        start = self.data_start + t.offset
        buf = np.frombuffer(self._mmap, dtype=np.uint8, count=self.nbytes(t), offset=start)
        qtype = gguf.GGMLQuantizationType(t.type_id)
        if qtype == gguf.GGMLQuantizationType.F32:
            return buf.view(np.float32).reshape(t.shape)
        if qtype == gguf.GGMLQuantizationType.F16:
            return buf.view(np.float16).reshape(t.shape)
        block, type_size = self._sizes[qtype]
        return buf.reshape(t.shape[:-1] + (t.dims[0] // block * type_size,))


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The float16 scale stored at byte `start` of every block, as float32 [n, 1]."""
    return np.ascontiguousarray(blocks[:, start:start + 2]).view(np.float16).astype(np.float32)


def dequantize(raw: np.ndarray, type_name: str) -> np.ndarray | None:
    """Whole-tensor numpy dequantization of the formats llama.cpp uses most (Q8_0, Q4_0, Q4_1),
    same arithmetic as `gguf.quants` but without its per-row-group Python loop; None for other
    types (the caller falls back to `gguf.quants.dequantize`). raw: uint8 [rows..., row_bytes]."""
    layouts = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}
    if type_name not in layouts:
        return None
    rows = raw.shape[:-1]
    blocks = raw.reshape(-1, layouts[type_name])
    out = np.empty((blocks.shape[0], 32), np.float32)
    if type_name == "Q8_0":
        np.multiply(_f16(blocks, 0), blocks[:, 2:].view(np.int8), out=out)
    else:
        qs = blocks[:, 2:] if type_name == "Q4_0" else blocks[:, 4:]
        # ggml packs element j in the low nibble and element j + 16 in the high nibble of byte j
        np.bitwise_and(qs, 0x0F, out=out[:, :16], casting="unsafe")
        np.right_shift(qs, 4, out=out[:, 16:], casting="unsafe")
        if type_name == "Q4_0":
            out -= 8.0
            out *= _f16(blocks, 0)
        else:
            out *= _f16(blocks, 0)
            out += _f16(blocks, 2)
    return out.reshape(rows + (-1,))
