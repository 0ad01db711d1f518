"""The safetensors container under KV Scope traces, with numpy alone: validated reading
(every header field checked; errors name the file and the field) and aligned, atomic
writing, plus typed access to the JSON trace document (_Obj). Used by trace.py,
format_v1.py and format_v2.py; see docs/trace-format.md."""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

MAX_HEADER_BYTES = 100 * 1024 * 1024

# safetensors dtype -> (numpy little-endian dtype, bytes per element)
_DTYPES = {
    "F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1),
    "U64": ("<u8", 8), "U32": ("<u4", 4), "U16": ("<u2", 2), "U8": ("u1", 1), "BOOL": ("u1", 1),
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
STORE_DTYPES = ("F32", "F16", "BF16")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class TraceError(ValueError):
    """A malformed or inconsistent trace; names the file and the offending field."""

    def __init__(self, file: str, field: str, detail: str):
        self.file, self.field, self.detail = file, field, detail
        where = file or "input"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {detail}")


# ----------------------------------------------------------------------------- document

class _Obj:
    """Typed access to one JSON object with field paths for errors (like TraceJson.cpp)."""

    def __init__(self, j: Any, file: str, path: str):
        self.j, self.file, self.path = j, file, path

    def has(self, k: str) -> bool:
        return isinstance(self.j, dict) and self.j.get(k) is not None

    def at(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def fail(self, k: str, what: str):
        raise TraceError(self.file, self.at(k), what)

    def integer(self, k: str, default: Optional[int] = None) -> int:
        if not self.has(k):
            if default is None:
                self.fail(k, "missing")
            return default
        v = self.j[k]
        if not _is_int(v):
            self.fail(k, f"expected an integer, found {json.dumps(v)}")
        return v

    def string(self, k: str, default: str = "") -> str:
        if not self.has(k):
            return default
        if not isinstance(self.j[k], str):
            self.fail(k, "expected a string")
        return self.j[k]

    def ints(self, k: str, required: bool = True) -> List[int]:
        if not self.has(k):
            if required:
                self.fail(k, "missing")
            return []
        v = self.j[k]
        if not isinstance(v, list):
            self.fail(k, "expected an array of integers")
        for x in v:
            if not _is_int(x):
                self.fail(k, f"expected integers, found {json.dumps(x)}")
        return list(v)

    def strings(self, k: str) -> List[str]:
        if not self.has(k):
            return []
        v = self.j[k]
        if not isinstance(v, list):
            self.fail(k, "expected an array of strings")
        if any(not isinstance(x, str) for x in v):
            self.fail(k, "expected strings")
        return list(v)

    def child(self, k: str) -> Any:
        if not self.has(k):
            self.fail(k, "missing")
        return self.j[k]


# ----------------------------------------------------------------------------- tensors


def _float32(a, what: str) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch tensor slipped through
        a = a.detach().float().cpu().numpy()
    out = np.asarray(a, dtype=np.float32)
    return np.ascontiguousarray(out)


def _to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (as SafetensorsWriter)."""
    x = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    nan = (x & 0x7FFFFFFF) > 0x7F800000
    rounded = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF
    quiet = ((x >> 16) | 0x40) & 0xFFFF
    return np.where(nan, quiet, rounded).astype("<u2")


def stored_values(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 `a` as a reader reads it back after storing it as `dtype` (F32, F16 or BF16,
    rounded to nearest even like _encode), as a float32 array."""
    a = np.ascontiguousarray(a, dtype="<f4")
    if dtype == "F16":
        with np.errstate(over="ignore"):
            return a.astype("<f2").astype("<f4")
    if dtype == "BF16":
        return (_to_bf16_bits(a).astype(np.uint32) << 16).view("<f4").reshape(a.shape)
    return a


def _encode(a: np.ndarray, dtype: str) -> bytes:
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "F16":
        with np.errstate(over="ignore"):
            return np.ascontiguousarray(a, dtype="<f4").astype("<f2").tobytes()
    if dtype == "BF16":
        return _to_bf16_bits(a).tobytes()
    if dtype in _DTYPES and dtype not in FLOAT_DTYPES:  # integers (e.g. U64 checksums): exact
        a = np.asarray(a)
        if a.dtype.kind not in "iub":
            raise ValueError(f"{dtype} tensors need an integer array, not {a.dtype}")
        return np.ascontiguousarray(a, dtype=_DTYPES[dtype][0]).tobytes()
    raise ValueError(f"storage dtype must be one of {STORE_DTYPES} or an integer type, not {dtype!r}")


def write_safetensors(path: str, tensors: Sequence[tuple], metadata: Dict[str, str],
                      overwrite: bool = True) -> None:
    """Writes (name, array, dtype) tuples: float arrays as F32/F16/BF16, integer arrays as
    an integer dtype (U64, I64, ...). Atomic: temporary file + rename."""
    if not overwrite and os.path.exists(path):
        raise TraceError(path, "", "refusing to overwrite an existing file")
    header: Dict[str, Any] = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name, array, dtype in tensors:
        data = _encode(array, dtype)
        header[name] = {"dtype": dtype, "shape": [int(d) for d in array.shape],
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hs = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hs += b" " * ((8 - len(hs) % 8) % 8)  # the data buffer starts 8-byte aligned
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(hs)))
            f.write(hs)
            for b in blobs:
                f.write(b)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


class _Container:
    """A parsed safetensors file, validated like SafetensorsFile::open."""

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                self.buf = f.read()
        except OSError as e:
            raise TraceError(path, "", f"cannot open: {e.strerror or e}") from None
        size = len(self.buf)
        if size < 8:
            raise TraceError(path, "header length", f"file is {size} bytes; a safetensors file starts "
                             "with an 8-byte header length (truncated file?)")
        (n,) = struct.unpack_from("<Q", self.buf, 0)
        if n > size - 8:
            raise TraceError(path, "header length", f"header claims {n} bytes but only {size - 8} "
                             "follow (truncated or not safetensors)")
        if n > MAX_HEADER_BYTES:
            raise TraceError(path, "header length", f"header of {n} bytes exceeds the 100 MB limit")
        try:
            header = json.loads(self.buf[8:8 + n].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TraceError(path, "header", f"invalid JSON: {e}") from None
        if not isinstance(header, dict):
            raise TraceError(path, "header", "expected a JSON object")
        self.data_start, self.data_size = 8 + n, size - 8 - n
        self.float_dtypes: set = set()  # dtypes of the float tensors read so far
        self.metadata: Dict[str, str] = {}
        self.entries: Dict[str, tuple] = {}
        for name, t in header.items():
            if name == "__metadata__":
                if not isinstance(t, dict):
                    raise TraceError(path, "__metadata__", "expected an object")
                for k, v in t.items():
                    if not isinstance(v, str):
                        raise TraceError(path, f"__metadata__.{k}", "metadata values must be strings")
                    self.metadata[k] = v
                continue
            self.entries[name] = self._entry(name, t)
        spans = sorted((e[2], e[3], name) for name, e in self.entries.items())
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0 and e1 > b1:
                raise TraceError(path, f"{n1}.data_offsets",
                                 f"overlaps tensor '{n0}' (bytes {b1}..{e0})")

    def _entry(self, name: str, t: Any) -> tuple:
        path = self.path
        if not isinstance(t, dict):
            raise TraceError(path, name, "tensor entry must be an object")
        dtype = t.get("dtype")
        if not isinstance(dtype, str):
            raise TraceError(path, f"{name}.dtype", "missing or not a string")
        if dtype not in _DTYPES:
            raise TraceError(path, f"{name}.dtype",
                             f"unknown dtype '{dtype}' (supported: {' '.join(_DTYPES)})")
        shape = t.get("shape")
        if not isinstance(shape, list):
            raise TraceError(path, f"{name}.shape", "missing or not an array")
        if any(not _is_int(d) or d < 0 for d in shape):
            raise TraceError(path, f"{name}.shape", "dimensions must be non-negative integers")
        off = t.get("data_offsets")
        if not (isinstance(off, list) and len(off) == 2 and all(_is_int(o) and o >= 0 for o in off)):
            raise TraceError(path, f"{name}.data_offsets", "expected [begin, end] byte offsets")
        begin, end = off
        if begin > end:
            raise TraceError(path, f"{name}.data_offsets", f"begin {begin} is after end {end}")
        if end > self.data_size:
            raise TraceError(path, f"{name}.data_offsets", f"end {end} is beyond the data buffer of "
                             f"{self.data_size} bytes (truncated file?)")
        expected = int(np.prod(shape, dtype=np.int64)) * _DTYPES[dtype][1]
        if end - begin != expected:
            raise TraceError(path, f"{name}.data_offsets", f"holds {end - begin} bytes but shape and "
                             f"dtype need {expected}")
        return dtype, tuple(int(d) for d in shape), begin, end

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def dtype(self, name: str) -> str:
        return self.entries[name][0]

    def shape(self, name: str) -> tuple:
        return self.entries[name][1]

    def _raw(self, name: str) -> np.ndarray:
        if name not in self.entries:
            raise TraceError(self.path, name, "missing tensor")
        dtype, shape, begin, end = self.entries[name]
        return np.frombuffer(self.buf, dtype=_DTYPES[dtype][0], count=(end - begin) // _DTYPES[dtype][1],
                             offset=self.data_start + begin)

    def read(self, name: str) -> np.ndarray:
        """The tensor in its stored dtype (a copy; BF16 as its uint16 bits)."""
        return self._raw(name).reshape(self.entries[name][1]).copy()

    def read_float(self, name: str) -> np.ndarray:
        raw = self._raw(name)
        dtype, shape = self.entries[name][:2]
        self.float_dtypes.add(dtype)
        if dtype == "BF16":
            out = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            out = raw.astype(np.float32)
        return out.reshape(shape)

    def read_records(self, name: str, heads: int, head_dim: int) -> np.ndarray:
        """A float32 [h_kv, t, d] tensor of K/V records; its shape must match the model."""
        if name in self.entries:
            shape = self.entries[name][1]
            if len(shape) != 3 or shape[0] != heads or shape[2] != head_dim:
                raise TraceError(self.path, name, f"shape {list(shape)} but the model block says "
                                 f"[{heads}, t, {head_dim}]")
        return self.read_float(name)


def _columns(t: np.ndarray, begin: int, end: int) -> np.ndarray:
    """Columns [begin, end) of a [h_kv, t, d] tensor, as a contiguous copy."""
    return np.ascontiguousarray(t[:, begin:end, :])
