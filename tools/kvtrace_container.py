"""The safetensors container under KV Scope traces, with numpy alone: validated reading
(every header field checked; errors name the file and the field) and aligned, atomic
writing. Used by kvtrace.py; see docs/trace-format.md."""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, Sequence

import numpy as np

MAX_HEADER_BYTES = 100 * 1024 * 1024

# safetensors dtype -> (numpy little-endian dtype, bytes per element)
_DTYPES = {
    "F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1),
    "U8": ("u1", 1), "BOOL": ("u1", 1),
}
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


# ----------------------------------------------------------------------------- data model


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


def _encode(a: np.ndarray, dtype: str) -> bytes:
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "F16":
        with np.errstate(over="ignore"):
            return np.ascontiguousarray(a, dtype="<f4").astype("<f2").tobytes()
    if dtype == "BF16":
        return _to_bf16_bits(a).tobytes()
    raise ValueError(f"storage dtype must be one of {STORE_DTYPES}, not {dtype!r}")


def write_safetensors(path: str, tensors: Sequence[tuple], metadata: Dict[str, str],
                      overwrite: bool = True) -> None:
    """Writes (name, float array, dtype) tuples. Atomic: temporary file + rename."""
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

    def read_float(self, name: str) -> np.ndarray:
        if name not in self.entries:
            raise TraceError(self.path, name, "missing tensor")
        dtype, shape, begin, end = self.entries[name]
        raw = np.frombuffer(self.buf, dtype=_DTYPES[dtype][0], count=(end - begin) // _DTYPES[dtype][1],
                            offset=self.data_start + begin)
        if dtype == "BF16":
            out = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            out = raw.astype(np.float32)
        return out.reshape(shape)
