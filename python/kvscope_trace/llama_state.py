"""llama.cpp's sequence state (what `llama_state_seq_get_data` returns and
`llama_state_seq_save_file` writes) read into per-layer K/V rows, numpy only.

The layout (llama.cpp src/llama-context.cpp, src/llama-kv-cache.cpp state_write), which
KV Scope's C++ reader (core/src/trace/LlamaSeqState.hpp) reads too:

    file: u32 'ggsq' | u32 version (2, 3) | u32 n_token | i32 tokens[n_token] | memory
    blob: u32 0xaf143cd8 | i32 seq_id | memory
    memory: u32 n_stream, per stream u32 cell_count and when > 0:
        per cell i32 pos | u32 n_seq_id | i32 seq_id[n_seq_id]
        u32 v_trans | u32 n_layer
        per layer i32 k_type | u64 k_row_bytes | rows[cell_count]
        v_trans 0: per layer i32 v_type | u64 v_row_bytes | rows[cell_count]
        v_trans 1: per layer i32 v_type | u32 element_bytes | u32 n_embd_v | [n_embd_v][cell_count]

A row is n_kv_heads x head_dim values, head after head, in the cache's ggml type. A model with
sliding-window layers (Gemma 2 and 3) runs llama.cpp's iswa cache: its memory is two such
caches, the non-SWA layers' then the SWA layers' (`SeqState.swa`), the second without the cells
its window masks for the sequence.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

FILE_MAGIC = 0x67677371  # 'ggsq'
BLOB_MAGIC = 0xAF143CD8

# ggml_type -> (name, values per block, bytes per block): the cache types llama.cpp offers
# for -ctk / -ctv that KV Scope budgets for.
CACHE_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2), 8: ("Q8_0", 32, 34),
               2: ("Q4_0", 32, 18)}
CACHE_TYPE_IDS = {v[0].lower(): k for k, v in CACHE_TYPES.items()}


class StateError(ValueError):
    """A state that does not parse: `field` names where."""

    def __init__(self, field_: str, detail: str):
        super().__init__(f"llama.cpp state: field '{field_}': {detail}")
        self.field, self.detail = field_, detail


@dataclass
class SeqState:
    tokens: List[int] = field(default_factory=list)  # a file's token list
    positions: List[int] = field(default_factory=list)  # per cell, physical order
    types: Tuple[str, str] = ("", "")  # K, V cache types
    keys: List[np.ndarray] = field(default_factory=list)  # per layer [cells, n_embd_k] float32
    values: List[np.ndarray] = field(default_factory=list)
    swa: Optional["SeqState"] = None  # an iswa state's second cache: the SWA layers'


def dequantize(type_id: int, raw: memoryview, rows: int, row_bytes: int) -> np.ndarray:
    """`rows` rows of `row_bytes` of ggml type `type_id` as float32 [rows, width], as ggml's
    dequantize_row_* computes them."""
    if type_id not in CACHE_TYPES:
        raise StateError("k_type", f"ggml type {type_id} is not a cache type this reader knows "
                         f"({', '.join(v[0] for v in CACHE_TYPES.values())})")
    name, per_block, block_bytes = CACHE_TYPES[type_id]
    if row_bytes <= 0 or row_bytes % block_bytes:
        raise StateError("row_bytes", f"{row_bytes} bytes per row is not a whole number of {name} blocks")
    width = row_bytes // block_bytes * per_block
    buf = np.frombuffer(raw, dtype=np.uint8, count=rows * row_bytes)
    if name == "F32":
        out = buf.view("<f4")
    elif name == "F16":
        out = buf.view("<f2").astype(np.float32)
    elif name == "BF16":
        out = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
    elif name == "Q8_0":
        b = buf.view(np.dtype([("d", "<f2"), ("q", "i1", 32)]))
        out = b["d"].astype(np.float32)[:, None] * b["q"].astype(np.float32)
    else:  # Q4_0: low nibbles are the block's first 16 values, high nibbles the last 16
        b = buf.view(np.dtype([("d", "<f2"), ("qs", "u1", 16)]))
        lo = (b["qs"] & 0x0F).astype(np.float32) - 8.0
        hi = (b["qs"] >> 4).astype(np.float32) - 8.0
        out = b["d"].astype(np.float32)[:, None] * np.concatenate([lo, hi], axis=1)
    return np.ascontiguousarray(out.reshape(rows, width), dtype=np.float32)


class _Cursor:
    def __init__(self, data: bytes):
        self.data, self.at = memoryview(data), 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise StateError(what, f"needs {n} bytes at offset {self.at}, {len(self.data) - self.at} left")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def i32(self, what: str) -> int:
        return struct.unpack("<i", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]


def _cache(c: "_Cursor", s: SeqState, at: str = "") -> None:
    """One attention cache (n_stream, its streams) into `s`; `at` prefixes the fields."""
    streams = c.u32(at + "n_stream")
    if not 1 <= streams <= 256:
        raise StateError(at + "n_stream", f"{streams} streams")
    for _ in range(streams):
        cells = c.u32(at + "cell_count")
        if cells == 0:
            continue
        if s.positions:
            raise StateError(at + "cell_count", "a second stream holds cells too")
        for i in range(cells):
            s.positions.append(c.i32(f"{at}cells[{i}].pos"))
            c.take(4 * c.u32(f"{at}cells[{i}].n_seq_id"), f"{at}cells[{i}].seq_id")
        v_trans, layers = c.u32(at + "v_trans"), c.u32(at + "n_layer")
        kt = vt = -1
        for l in range(layers):
            kt = c.i32(f"{at}layer {l} k_type")
            row = c.u64(f"{at}layer {l} k_row_bytes")
            s.keys.append(dequantize(kt, c.take(row * cells, f"{at}layer {l} k rows"), cells, row))
        for l in range(layers):
            vt = c.i32(f"{at}layer {l} v_type")
            if not v_trans:
                row = c.u64(f"{at}layer {l} v_row_bytes")
                s.values.append(dequantize(vt, c.take(row * cells, f"{at}layer {l} v rows"), cells, row))
                continue
            el, width = c.u32(f"{at}layer {l} v_element_bytes"), c.u32(f"{at}layer {l} n_embd_v")
            cols = dequantize(vt, c.take(el * width * cells, f"{at}layer {l} v columns"), width, el * cells)
            s.values.append(np.ascontiguousarray(cols.T))
        s.types = (CACHE_TYPES[kt][0], CACHE_TYPES[vt][0])


def parse(data: bytes) -> SeqState:
    """A whole state file or get_data blob: one attention cache, or an iswa state's two."""
    c, s = _Cursor(data), SeqState()
    magic = c.u32("magic")
    if magic == FILE_MAGIC:
        version = c.u32("version")
        if version not in (2, 3):
            raise StateError("version", f"format version {version}; this reader knows 2 and 3")
        n = c.u32("n_token_count")
        s.tokens = list(struct.unpack(f"<{n}i", c.take(4 * n, "tokens")))
    elif magic == BLOB_MAGIC:
        c.i32("seq_id")
    else:
        raise StateError("magic", f"0x{magic:08x} is not a llama.cpp sequence state")
    _cache(c, s)
    if c.at != len(c.data):
        left, s.swa = len(c.data) - c.at, SeqState()
        try:
            _cache(c, s.swa, "swa ")
        except StateError as e:
            raise StateError(e.field, f"{e.detail}: the {left} bytes after the first cache do not read as an "
                             "iswa state's SWA cache (a hybrid model's recurrent cache is not read)") from None
    if c.at != len(c.data):
        raise StateError("memory", f"{len(c.data) - c.at} bytes follow the second cache")
    return s


def unpermute_heads(rows: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    """llama.cpp's llama architecture keeps each key head's rotary pairs as (2p, 2p + 1)
    (convert_hf_to_gguf.py permuted q/k); back to HF's (p, p + d/2)."""
    r = rows.reshape(rows.shape[0], heads, head_dim // 2, 2)
    return np.ascontiguousarray(r.transpose(0, 1, 3, 2).reshape(rows.shape[0], heads * head_dim))


def swa_layers(pattern, layers: int) -> List[bool]:
    """llama.cpp's per-layer SWA flags (llama_hparams::set_swa_pattern): `pattern` a list of
    flags (the GGUF's `ARCH.attention.sliding_window_pattern` array) or a period n (every n-th
    layer global, the others sliding)."""
    if isinstance(pattern, (list, tuple)):
        if len(pattern) != layers:
            raise StateError("sliding_window_pattern", f"{len(pattern)} flags for {layers} layers")
        return [bool(x) for x in pattern]
    n = int(pattern)
    return [n == 0 or i % n < n - 1 for i in range(layers)]


def _placed(s: SeqState, swa: Optional[Sequence[bool]]) -> List[Tuple[SeqState, int]]:
    """Per layer in model order, the cache that holds it and its index there: one cache holds
    every layer; an iswa state's first the non-SWA layers, its second the SWA ones (`swa` the
    model's per-layer SWA flags), each in layer order."""
    if s.swa is None:
        return [(s, i) for i in range(len(s.keys))]
    if swa is None or len(s.keys) != sum(1 for x in swa if not x) or len(s.swa.keys) != sum(swa):
        raise StateError("swa n_layer", f"an iswa state of {len(s.keys)} + {len(s.swa.keys)} layers; the "
                         "model's SWA layers are needed to place them")
    placed, counts = [], [0, 0]
    for is_swa in swa:
        placed.append((s.swa if is_swa else s, counts[is_swa]))
        counts[is_swa] += 1
    return placed


def in_model_order(s: SeqState, swa: Optional[Sequence[bool]] = None) -> SeqState:
    """One cache of every layer in model order: an iswa state's two merged (`swa` the model's
    per-layer SWA flags), which needs its SWA cache to hold every cell of the sequence."""
    if s.swa is None:
        return s
    placed = _placed(s, swa)
    if sorted(s.swa.positions) != sorted(s.positions):
        raise StateError("swa cell_count", f"the SWA cache holds {len(s.swa.positions)} of the sequence's "
                         f"{len(s.positions)} cells: llama.cpp saves only what the window still attends, "
                         "so the earlier rows of the sliding layers are gone (the sequence must fit the window)")
    order = {p: i for i, p in enumerate(s.swa.positions)}
    back = [order[p] for p in s.positions]  # the SWA rows in the first cache's cell order
    merged = SeqState(tokens=s.tokens, positions=s.positions, types=s.types)
    for c, i in placed:
        k, v = c.keys[i], c.values[i]
        if c is s.swa:
            k, v = k[back], v[back]
        merged.keys.append(k)
        merged.values.append(v)
    return merged


def held_layers(s: SeqState, heads: int, head_dim: int, permuted: bool, swa: Optional[Sequence[bool]] = None):
    """Per layer in model order, the rows its cache holds: (k, v [1, h_kv, t, d], positions),
    cells ordered by position. An iswa state's sliding layers hold the cells their window
    still attends, fewer than the others once the sequence is longer than the window."""
    out = []
    for c, i in _placed(s, swa):
        (k, v), = as_cache(SeqState(positions=c.positions, keys=[c.keys[i]], values=[c.values[i]]),
                           heads, head_dim, permuted)[0]
        out.append((k, v, sorted(int(p) for p in c.positions)))
    return out


def as_cache(s: SeqState, heads: int, head_dim: int, permuted: bool, swa: Optional[Sequence[bool]] = None):
    """The state as a legacy cache ((k, v) per layer, [1, h_kv, cells, d], cells ordered by
    position) and the sorted positions; an iswa state merged in model order (`swa`)."""
    s = in_model_order(s, swa)
    order = np.argsort(np.asarray(s.positions, dtype=np.int64), kind="stable")
    out = []
    for k, v in zip(s.keys, s.values):
        if k.shape[1] != heads * head_dim or v.shape[1] != heads * head_dim:
            raise StateError("row_bytes", f"rows of {k.shape[1]} / {v.shape[1]} values; the model's "
                             f"{heads} kv heads of {head_dim} make {heads * head_dim}")
        if permuted:
            k = unpermute_heads(k, heads, head_dim)

        def split(rows):
            return rows[order].reshape(len(order), heads, head_dim).transpose(1, 0, 2)[None]
        out.append((split(k), split(v)))
    return tuple(out), [int(s.positions[i]) for i in order]
