"""The version-2 layout of KV Scope traces (docs/trace-format.md), for trace.py: the step
table as JSON columns (`steps: {"count": N, "request": [...], ...}`) and the per-step data
packed into one tensor per kind (`logits` [R, V], `layer{l}.k|v|cache_k|cache_v`
[h_kv, A_l, d] concatenated along axis 1 in step order, `checksums` U64 [C, L, 2],
`ring_positions` I32 [R, Lr, S]: the slot maps of the ring layers, see layer_kinds.py;
`experts` I32 [N, L, K]: a mixture of experts' choices, one row per fed entry).

Both directions live here: parse_columns and load_packed read, pack writes. The step fields
both versions share are read by trace.py's parse_step (handed in), which also derives
appended records and cache lengths for both versions (kvtrace._attach_layers). Errors name
the column and the step: `steps.positions[3]`, `steps.logits_row[2]`, `layer1.k`."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from . import layer_kinds
from .container import STORE_DTYPES, TraceError, _Container, _columns, _is_int, _Obj

VERSION = 2

# step columns of version 2 (docs/trace-format.md, "Step columns"); others are kept in Step.extra
STEP_COLUMNS = ("request", "step", "tick", "slot", "fed_ids", "positions", "fed_mask", "chosen",
                "rng_draws_before", "rng_draws_after", "weights_version", "events", "logits_row",
                "appended", "snapshot_lengths", "cache_lengths", "checksum_row", "draft_count",
                "accepted_count", "ring_row", "reused_count", "reused_from", "reused_blocks",
                "expert_row")
REQUIRED_COLUMNS = ("request", "step", "fed_ids", "positions")


@dataclasses.dataclass
class Packing:
    """Where a version-2 step's data lies in the packed tensors (None / -1: nowhere)."""
    logits_row: int = -1
    appended: Optional[List[Optional[int]]] = None          # per layer, columns of layer{l}.k
    snapshot_lengths: Optional[List[Optional[int]]] = None  # per layer, columns of layer{l}.cache_k
    checksum_row: int = -1
    checksums: Optional[List[tuple]] = None  # per layer (key, value) hex, from the tensor
    ring_row: int = -1
    ring: Optional[List[Optional[List[int]]]] = None  # per layer its slot map (ring layers), from the tensor
    expert_row: int = -1


# ----------------------------------------------------------------------------- read

class _Row(_Obj):
    """Entry i of every version-2 step column, read like a version-1 step object; fields
    are named steps.<column>[i]."""

    def __init__(self, columns: Dict[str, list], file: str, i: int):
        super().__init__({k: c[i] for k, c in columns.items()}, file, "steps")
        self.i = i

    def at(self, k: str) -> str:
        return f"steps.{k}[{self.i}]"

    def row(self, k: str) -> int:
        r = self.integer(k, -1)
        if r < -1:
            self.fail(k, f"expected a row index or -1, found {r}")
        return r

    def counts(self, k: str, L: int) -> Optional[List[Optional[int]]]:
        """null or one non-negative integer or null per layer (null when all are null)."""
        if not self.has(k):
            return None
        v = self.j[k]
        if not isinstance(v, list) or len(v) != L or \
                any(x is not None and (not _is_int(x) or x < 0) for x in v):
            self.fail(k, f"expected null or {L} entries (one per layer), each a non-negative "
                      f"integer or null, found {json.dumps(v)}")
        return None if all(x is None for x in v) else list(v)


def parse_columns(sj: Any, file: str, parse_step: Callable[[_Obj, int], Any], L: int):
    """The document's `steps` object of columns -> (kvtrace.Steps, their Packing).
    parse_step(obj, i) reads the fields version 1 shares."""
    if not isinstance(sj, dict):
        raise TraceError(file, "steps", "expected an object of columns (trace version 2)")
    top = _Obj(sj, file, "steps")
    n = top.integer("count")
    if n < 0:
        top.fail("count", f"expected a non-negative integer, found {n}")
    columns = {}
    for k, c in sj.items():
        if k == "count" or c is None:  # a null column is an absent one
            continue
        if not isinstance(c, list) or len(c) != n:
            found = f"{len(c)} entries" if isinstance(c, list) else json.dumps(c)[:40]
            top.fail(k, f"expected an array of {n} entries (steps.count), found {found}")
        columns[k] = c
    for k in REQUIRED_COLUMNS:
        if k not in columns:
            top.fail(k, "missing (a required column)")
    unknown = [k for k in columns if k not in STEP_COLUMNS]
    steps, packing = [], []
    for i in range(n):
        s = _Row(columns, file, i)
        st = parse_step(s, i)
        st.extra = {k: columns[k][i] for k in unknown if columns[k][i] is not None}  # null: absent
        steps.append(st)
        packing.append(Packing(logits_row=s.row("logits_row"), appended=s.counts("appended", L),
                                snapshot_lengths=s.counts("snapshot_lengths", L),
                                checksum_row=s.row("checksum_row"), ring_row=s.row("ring_row"),
                                expert_row=s.row("expert_row")))
    return steps, packing


def _float_tensor(f: _Container, name: str) -> None:
    if f.dtype(name) not in STORE_DTYPES:
        raise TraceError(f.path, f"{name}.dtype", f"{f.dtype(name)}, but float tensors are "
                         f"{', '.join(STORE_DTYPES)}")


def load_packed(f: _Container, trace: Any, packing: List[Packing]) -> List[Optional[list]]:
    """The packed tensors: sets each step's logits and Packing.checksums and returns, per step,
    None (no layer data) or per layer [keys, values, cache_keys, cache_values] (keys None
    for a snapshot alone), like format_v1.load_tensors."""
    path, m = f.path, trace.model
    H, D, V = m["num_kv_heads"], m["head_dim"], m["vocab_size"]
    names = trace.stored_layers()  # entry l of the per-layer columns is model layer names[l]
    L = len(names)
    if trace.recorded_layers is not None:
        for name in sorted(f.entries):
            digits = name[5:].split(".")[0] if name.startswith("layer") else ""
            if digits.isdigit() and int(digits) not in names:
                raise TraceError(path, name, f"layer {digits} is not in recorded_layers (the layers "
                                 "this trace holds)")
    rows, logits = 0, None
    if "logits" in f:
        _float_tensor(f, "logits")
        if len(f.shape("logits")) != 2 or f.shape("logits")[1] != V:
            raise TraceError(path, "logits", f"shape {list(f.shape('logits'))} but model.vocab_size "
                             f"is {V} (expected [rows, {V}])")
        logits = f.read_float("logits")
        rows = logits.shape[0]
    _check_rows(f, "logits", "logits_row", [p.logits_row for p in packing], rows)
    for i, (s, p) in enumerate(zip(trace.steps, packing)):
        if p.logits_row >= 0:
            s.logits = logits[p.logits_row].copy()
        elif s.chosen >= 0:
            raise TraceError(path, f"steps.logits_row[{i}]", f"step {i} chose token {s.chosen} but "
                             "names no logits row")

    stored: List[Optional[list]] = []
    for i, p in enumerate(packing):
        if p.appended is None and p.snapshot_lengths is None:
            stored.append(None)
            continue
        for l in range(L):
            if (p.appended is None or p.appended[l] is None) and \
                    (p.snapshot_lengths is None or p.snapshot_lengths[l] is None):
                raise TraceError(path, f"steps.appended[{i}]", f"layer {l} has neither an appended "
                                 "count nor a snapshot length")
        stored.append([[None] * 4 for _ in range(L)])
    for l in range(L):
        for column, kinds, slot in (("appended", ("k", "v"), 0), ("snapshot_lengths", ("cache_k", "cache_v"), 2)):
            counts = [getattr(p, column)[l] if getattr(p, column) is not None else None for p in packing]
            total = sum(c for c in counts if c is not None)
            for j, kind in enumerate(kinds):
                name = f"layer{names[l]}.{kind}"
                if name in f:
                    _float_tensor(f, name)
                    t = f.read_records(name, H, D)
                elif total:
                    raise TraceError(path, name, f"missing, but steps.{column} adds up to {total} "
                                     "records (truncated or inconsistent trace)")
                else:
                    t = np.zeros((H, 0, D), np.float32)
                if t.shape[1] != total:
                    raise TraceError(path, name, f"holds {t.shape[1]} records but steps.{column} "
                                     f"adds up to {total} (truncated or inconsistent trace)")
                offset = 0
                for i, c in enumerate(counts):
                    if c is not None:
                        stored[i][l][slot + j] = _columns(t, offset, offset + c)
                        offset += c

    sums = np.zeros((0, L, 2), np.uint64)
    if "checksums" in f:
        shape = f.shape("checksums")
        if f.dtype("checksums") != "U64":
            raise TraceError(path, "checksums", f"dtype {f.dtype('checksums')}, expected U64")
        if len(shape) != 3 or shape[1] != L or shape[2] != 2:
            raise TraceError(path, "checksums", f"shape {list(shape)} but the model block says "
                             f"[rows, {L}, 2] (num_layers {L}; keys, values)")
        sums = f.read("checksums")
    _check_rows(f, "checksums", "checksum_row", [p.checksum_row for p in packing], len(sums))
    for p in packing:
        if p.checksum_row >= 0:
            p.checksums = [(f"{int(k):016x}", f"{int(v):016x}") for k, v in sums[p.checksum_row]]
    _load_ring_maps(f, trace, packing)
    _load_experts(f, trace, packing)
    return stored


def _load_experts(f: _Container, trace: Any, packing: List[Packing]) -> None:
    """experts [N, L, K] (I32): each step whose expert_row names a row gets its fed entries'
    rows (Step.experts)."""
    L = trace.model["num_layers"]
    table = np.zeros((0, L, 1), np.int32)
    if "experts" in f:
        shape = list(f.shape("experts"))
        if f.dtype("experts") != "I32" or len(shape) != 3 or shape[1] != L or not 1 <= shape[2] <= 256:
            raise TraceError(f.path, "experts", f"{f.dtype('experts')} {shape}, expected I32 "
                             f"[rows, {L}, K] (model.num_layers, K = 1..256 experts per token)")
        table = f.read("experts")
        if (table < -1).any():
            row = int(np.argwhere(table < -1)[0][0])
            raise TraceError(f.path, "experts", f"row {row} holds expert {int(table[table < -1][0])} "
                             "(an expert index >= 0, or -1 for none)")
    for i, (s, p) in enumerate(zip(trace.steps, packing)):
        if p.expert_row < 0:
            continue
        if "experts" not in f:
            raise TraceError(f.path, "experts", f"missing, but steps.expert_row[{i}] names row "
                             f"{p.expert_row} (truncated or inconsistent trace)")
        n = len(s.fed_ids)
        if p.expert_row + n > len(table):
            raise TraceError(f.path, f"steps.expert_row[{i}]", f"rows {p.expert_row}..{p.expert_row + n - 1} "
                             f"(one per fed entry) but experts has {len(table)} rows")
        s.experts = np.array(table[p.expert_row:p.expert_row + n], dtype=np.int32)


def _load_ring_maps(f: _Container, trace: Any, packing: List[Packing]) -> None:
    """ring_positions [R, Lr, S] (I32): sets Packing.ring of each step whose ring_row names a
    row, one map per ring layer (None for the other layers)."""
    kinds = layer_kinds.parse_layer_kinds(trace.extra, f.path, trace.model["num_layers"])
    L = len(trace.stored_layers())
    rings, S = layer_kinds.ring_layers(kinds, trace.stored_layers()), layer_kinds.ring_slots(kinds)
    maps = np.zeros((0, len(rings), S), np.int32)
    if "ring_positions" in f:
        if not rings:
            raise TraceError(f.path, "ring_positions", "slot maps, but layer_kinds names no ring layer "
                             "among the trace's layers (ring_slots)")
        shape = list(f.shape("ring_positions"))
        if f.dtype("ring_positions") != "I32" or len(shape) != 3 or shape[1:] != [len(rings), S]:
            raise TraceError(f.path, "ring_positions", f"{f.dtype('ring_positions')} {shape}, expected "
                             f"I32 [rows, {len(rings)}, {S}] ({len(rings)} ring layers of {S} slots)")
        maps = f.read("ring_positions")
        if (maps < -1).any():
            row = int(np.argwhere(maps < -1)[0][0])
            raise TraceError(f.path, "ring_positions", f"row {row} holds position {int(maps[maps < -1][0])} "
                             "(a position id >= 0, or -1 for an empty slot)")
    _check_rows(f, "ring_positions", "ring_row", [p.ring_row for p in packing], len(maps))
    for p in packing:
        if p.ring_row >= 0:
            p.ring = [None] * L
            for j, layer in enumerate(rings):
                p.ring[layer] = [int(x) for x in maps[p.ring_row, j]]


def _check_rows(f: _Container, tensor: str, column: str, rows: List[int], count: int) -> None:
    """Every row index of `column` names a row of `tensor` (which has `count` rows)."""
    for i, r in enumerate(rows):
        if r < 0:
            continue
        if tensor not in f:
            raise TraceError(f.path, tensor, f"missing, but steps.{column}[{i}] names row {r} "
                             "(truncated or inconsistent trace)")
        if r >= count:
            raise TraceError(f.path, f"steps.{column}[{i}]", f"row {r} is outside the {tensor} tensor "
                             f"({count} rows; truncated or inconsistent trace)")


# ----------------------------------------------------------------------------- write

def columns_of(trace: Any, checksums: Optional[List[list]] = None):
    """The version-2 step columns of `trace` and the arrays to pack: (columns, logits rows,
    per layer appended keys and values, per layer snapshots, checksum rows, ring_positions rows).
    `checksums`: per step, per layer (key, value) hex checksums to write instead of the
    records' (stored_checksums.for_storage); None: the records'."""
    steps, L = trace.steps, len(trace.stored_layers())
    n = len(steps)
    c: Dict[str, Any] = {"count": n}
    c["request"] = [s.request for s in steps]
    c["step"] = [s.step for s in steps]
    c["tick"] = [s.tick for s in steps]
    c["slot"] = [s.slot for s in steps]
    c["fed_ids"] = [[int(t) for t in s.fed_ids] for s in steps]
    c["positions"] = [[int(p) for p in s.positions] for s in steps]
    c["fed_mask"] = [[1 if m else 0 for m in s.fed_mask] if s.fed_mask else None for s in steps]
    for k in ("chosen", "rng_draws_before", "rng_draws_after", "weights_version"):
        c[k] = [getattr(s, k) for s in steps]
    c["events"] = [list(s.events) for s in steps]
    c["draft_count"] = [int(s.draft_count) for s in steps]   # speculative decoding; left out
    c["accepted_count"] = [int(s.accepted_count) for s in steps]  # when no step has drafts
    logits, kv, snaps, sums = [], [([], []) for _ in range(L)], [([], []) for _ in range(L)], []
    for k in ("logits_row", "appended", "snapshot_lengths", "cache_lengths", "checksum_row"):
        c[k] = []
    c["ring_row"], rings = _ring_rows(trace)
    c["expert_row"], experts = _expert_rows(trace)
    for i, s in enumerate(steps):
        pairs = checksums[i] if checksums is not None else [(l.checksum_k, l.checksum_v) for l in s.layers]
        c["logits_row"].append(len(logits) if s.logits is not None else -1)
        if s.logits is not None:
            logits.append(s.logits)
        appended, lengths = [None] * len(s.layers), [None] * len(s.layers)
        for l, rec in enumerate(s.layers):
            # records derived from a snapshot on read are not written again (the snapshot is)
            if rec.keys is not None and not (rec.derived and rec.cache_keys is not None):
                appended[l] = int(rec.keys.shape[1])
                kv[l][0].append(rec.keys)
                kv[l][1].append(rec.values)
            if rec.cache_keys is not None:
                lengths[l] = int(rec.cache_keys.shape[1])
                snaps[l][0].append(rec.cache_keys)
                snaps[l][1].append(rec.cache_values)
        c["appended"].append(appended if any(x is not None for x in appended) else None)
        c["snapshot_lengths"].append(lengths if any(x is not None for x in lengths) else None)
        c["cache_lengths"].append([int(l.cache_length) for l in s.layers] if s.layers else None)
        if len(s.layers) == L and all(k and v for k, v in pairs):
            c["checksum_row"].append(len(sums))
            sums.append([[int(k, 16), int(v, 16)] for k, v in pairs])
        else:
            c["checksum_row"].append(-1)
    defaults = {"tick": list(range(n)), "slot": c["request"], "fed_mask": [None] * n,
                "chosen": [-1] * n, "rng_draws_before": [0] * n, "rng_draws_after": [0] * n,
                "weights_version": [0] * n, "events": [[]] * n, "logits_row": [-1] * n,
                "appended": [None] * n, "snapshot_lengths": [None] * n, "cache_lengths": [None] * n,
                "checksum_row": [-1] * n, "draft_count": [0] * n, "accepted_count": [0] * n,
                "ring_row": [-1] * n, "expert_row": [-1] * n}
    for k, d in defaults.items():
        if c[k] == d:
            del c[k]
    if any(s.reused_count > 0 for s in steps):  # prefix-cache hits; left out without one
        c["reused_count"] = [int(s.reused_count) for s in steps]
        c["reused_from"] = [int(s.reused_from) for s in steps]
        c["reused_blocks"] = [[int(b) for b in s.reused_blocks] if s.reused_blocks else None for s in steps]
    for s in steps:  # unknown columns, kept from reading
        for k in s.extra:
            if k not in c and k not in STEP_COLUMNS and k != "count":
                c[k] = [t.extra.get(k) for t in steps]
    return c, logits, kv, snaps, sums, rings, experts


def _expert_rows(trace: Any):
    """(the expert_row column, the rows of experts): a step with expert choices gets its first
    row; a step whose entries took fewer experts than another's is padded with -1."""
    column, rows = [], []
    slots = max((np.asarray(s.experts).shape[2] for s in trace.steps if s.experts is not None), default=0)
    for s in trace.steps:
        if s.experts is None:
            column.append(-1)
            continue
        e = np.full((len(s.fed_ids), trace.model["num_layers"], slots), -1, np.int32)
        given = np.asarray(s.experts, dtype=np.int32)
        e[:, :, :given.shape[2]] = given
        column.append(len(rows))
        rows.extend(e)
    return column, rows


def _ring_rows(trace: Any):
    """(the ring_row column, the rows of ring_positions): a step whose ring layers hold their
    slot maps gets a row; a step without maps -1. ValueError for maps on a layer that is no
    ring layer, a map of another length than S, or a step that maps only some ring layers."""
    kinds = layer_kinds.parse_layer_kinds(trace.extra, "", trace.model["num_layers"])
    rings, S = layer_kinds.ring_layers(kinds, trace.stored_layers()), layer_kinds.ring_slots(kinds)
    column, rows = [], []
    for i, s in enumerate(trace.steps):
        mapped = [j for j, rec in enumerate(s.layers) if rec.ring_positions is not None]
        if not mapped:
            column.append(-1)
            continue
        if mapped != rings:
            raise ValueError(f"step {i}: slot maps on layer entries {mapped}, but the ring layers "
                             f"(layer_kinds with ring_slots) are entries {rings}: give one map per "
                             "ring layer")
        row = [list(s.layers[j].ring_positions) for j in rings]
        if any(len(m) != S or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) for x in m)
               for m in row):
            raise ValueError(f"step {i}: a slot map holds one position per ring slot ({S})")
        column.append(len(rows))
        rows.append(row)
    return column, rows


def pack(trace: Any, dtype: str, checksums: Optional[List[list]] = None):
    """The version-2 step columns of `trace` and its tensors as (name, array, dtype) for
    write_safetensors; a tensor whose column total is 0 is left out. `checksums`: as for
    columns_of (those a file stored as `dtype` can carry)."""
    columns, logits, kv, snaps, sums, rings, experts = columns_of(trace, checksums)
    tensors = []
    if sums:  # first: U64 rows stay 8-byte aligned whatever the float dtype
        tensors.append(("checksums", np.array(sums, dtype=np.uint64), "U64"))
    if rings:  # then the I32 maps, still 8-byte aligned
        tensors.append(("ring_positions", np.array(rings, dtype=np.int32), "I32"))
    if experts:  # I32 too
        tensors.append(("experts", np.array(experts, dtype=np.int32), "I32"))
    if logits:
        tensors.append(("logits", np.stack(logits), dtype))
    for l, name in enumerate(trace.stored_layers()):  # named by model layer
        for kinds, (ks, vs) in ((("k", "v"), kv[l]), (("cache_k", "cache_v"), snaps[l])):
            if sum(a.shape[1] for a in ks):
                tensors.append((f"layer{name}.{kinds[0]}", np.concatenate(ks, axis=1), dtype))
                tensors.append((f"layer{name}.{kinds[1]}", np.concatenate(vs, axis=1), dtype))
    return columns, tensors
