"""A minimal safetensors reader and writer in numpy, for the independent test engine.

It shares no code with KV Scope's C++ core or with tools/kvtrace.py: it parses the
container itself (an 8-byte little-endian header length, a JSON header, then the raw
tensor bytes) so the second engine reads checkpoints by a separate path.

Floats are returned as numpy arrays: F32 as float32, F16 as float16, BF16 as float32
(numpy has no bfloat16; the 16 stored bits are shifted into the high half of a float32,
which is exact). Integer tensors keep their integer type.

    tensors = load_file("model.safetensors")          # {name: np.ndarray}
    weights = load_checkpoint("models/llama")         # one file or an index of shards
    save_file("copy.safetensors", {"w": array})       # F32 (and integers) only
"""

from __future__ import annotations

import json
import os
import struct
from typing import Dict, Optional, Tuple

import numpy as np

# dtype name -> (numpy dtype as stored, bytes per element)
_STORED = {
    "F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1),
    "U64": ("<u8", 8), "U32": ("<u4", 4), "U16": ("<u2", 2), "U8": ("u1", 1), "BOOL": ("?", 1),
}
MAX_HEADER_BYTES = 100 * 1024 * 1024


def _fail(path: str, tensor: str, what: str) -> None:
    """Raises the ValueError every malformed input produces: file, tensor, problem."""
    where = f"{path}: tensor '{tensor}'" if tensor else path
    raise ValueError(f"{where}: {what}")


def read_header(path: str) -> Tuple[Dict[str, dict], Dict[str, str], int]:
    """Parses a safetensors header: (tensor entries by name, __metadata__, byte offset
    where the data section starts). Raises ValueError naming the file on bad input."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                _fail(path, "", "file is shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                _fail(path, "", f"header length {n} exceeds the file ({size} bytes)")
            raw = f.read(n)
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        _fail(path, "", "header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        _fail(path, "__metadata__", "expected a JSON object")
    data_start = 8 + n
    data_len = size - data_start
    for name, e in header.items():
        if not isinstance(e, dict):
            _fail(path, name, "entry is not a JSON object")
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in _STORED:
            _fail(path, name, f"unsupported dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            _fail(path, name, f"bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2
                or not all(isinstance(o, int) for o in offs) or not 0 <= offs[0] <= offs[1]):
            _fail(path, name, f"bad data_offsets {offs!r}")
        if offs[1] > data_len:
            _fail(path, name, f"data_offsets {offs} run past the data section ({data_len} bytes)")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if offs[1] - offs[0] != count * _STORED[dtype][1]:
            _fail(path, name, f"{offs[1] - offs[0]} bytes for shape {shape} of {dtype}")
    return header, meta, data_start


def load_file(path: str, names: Optional[set] = None) -> Dict[str, np.ndarray]:
    """Reads every tensor of one safetensors file (or only `names`) into numpy arrays
    (BF16 widened to float32, F16 kept as float16). The arrays are copies."""
    header, _, start = read_header(path)
    with open(path, "rb") as f:
        blob = f.read()
    out = {}
    for name, e in header.items():
        if names is not None and name not in names:
            continue
        np_dtype, _ = _STORED[e["dtype"]]
        a, b = e["data_offsets"]
        arr = np.frombuffer(blob, dtype=np_dtype, count=(b - a) // _STORED[e["dtype"]][1],
                            offset=start + a)
        if e["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.reshape(e["shape"]).copy()
    return out


def checkpoint_files(directory: str) -> Dict[str, str]:
    """Maps tensor name -> shard path for a checkpoint directory: the weight_map of
    model.safetensors.index.json when there is one, else the one model.safetensors."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as f:
                wm = json.load(f)["weight_map"]
        except (OSError, KeyError, json.JSONDecodeError) as e:
            raise ValueError(f"{index}: no readable weight_map ({e})") from None
        if not isinstance(wm, dict):
            raise ValueError(f"{index}: weight_map is not an object")
        return {k: os.path.join(directory, v) for k, v in wm.items()}
    single = os.path.join(directory, "model.safetensors")
    if not os.path.exists(single):
        raise ValueError(f"{directory}: no model.safetensors or model.safetensors.index.json")
    header, _, _ = read_header(single)
    return {k: single for k in header}


def load_checkpoint(directory: str) -> Dict[str, np.ndarray]:
    """Reads all weights of a (possibly sharded) checkpoint directory."""
    files = checkpoint_files(directory)
    out: Dict[str, np.ndarray] = {}
    for shard in sorted(set(files.values())):
        wanted = {k for k, v in files.items() if v == shard}
        got = load_file(shard, wanted)
        missing = wanted - set(got)
        if missing:
            _fail(shard, sorted(missing)[0], "listed in the index weight_map but not in the shard")
        out.update(got)
    return out


def stored_dtypes(directory: str) -> Dict[str, str]:
    """tensor name -> stored dtype string (F32, BF16, ...), from the headers only."""
    out = {}
    for shard in sorted(set(checkpoint_files(directory).values())):
        header, _, _ = read_header(shard)
        out.update({k: e["dtype"] for k, e in header.items()})
    return out


def save_file(path: str, tensors: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes a safetensors file. Floating arrays are written as F32, integer arrays as
    I64/I32; the header is space-padded so the data starts 8-byte aligned."""
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, offset = [], 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        if np.issubdtype(arr.dtype, np.floating):
            arr, dtype = np.ascontiguousarray(arr, dtype="<f4"), "F32"
        elif arr.dtype in (np.int64, np.int32):
            dtype = "I64" if arr.dtype == np.int64 else "I32"
            arr = np.ascontiguousarray(arr, dtype="<i8" if dtype == "I64" else "<i4")
        else:
            _fail(path, name, f"cannot write dtype {arr.dtype} (F32 and integers only)")
        data = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - (8 + len(raw)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for c in chunks:
            f.write(c)
