"""The version-2 layout of KV Scope traces (docs/trace-format.md), for trace.py: the step
table as JSON columns (`steps: {"count": N, "request": [...], ...}`) and the per-step data
packed into one tensor per kind (`logits` [R, V], `layer{l}.k|v|cache_k|cache_v`
[h_kv, A_l, d] concatenated along axis 1 in step order, `checksums` U64 [C, L, 2],
`ring_positions` I32 [R, Lr, S]: the slot maps of the ring layers, see layer_kinds.py;
`experts` I32 [N, L, K]: a mixture of experts' choices, one row per fed entry;
`layer{l}.conv_state` F32 [R, C, K] (or K-1 columns) and `layer{l}.recurrent_state` F32 [R, Hv, Dk, Dv]: a
recurrent layer's state after the steps whose `state_row` names row r, rows in step order).

Both directions live here: parse_columns and load_packed read, pack writes. The step fields
both versions share are read by trace.py's parse_step (handed in), which also derives
appended records and cache lengths for both versions (kvtrace._attach_layers). Errors name
the column and the step: `steps.positions[3]`, `steps.logits_row[2]`, `layer1.k`."""

from __future__ import annotations

import dataclasses
import json
import re
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
                "expert_row", "state_row")
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
    state_row: Optional[int] = None  # None: no state_row column in the file
    states: Optional[Dict[int, tuple]] = None  # layer entry -> (conv [C, K], recurrent [Hv, Dk, Dv])


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
                                expert_row=s.row("expert_row"),
                                state_row=s.row("state_row") if "state_row" in columns else None))
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
    Dv = m.get("value_head_dim") or D
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

    _check_recurrent(f, trace, packing)
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
                name, width = f"layer{names[l]}.{kind}", (D, Dv)[j]  # keys, then values
                if name in f:
                    _float_tensor(f, name)
                    t = f.read_records(name, H, width)
                elif total:
                    raise TraceError(path, name, f"missing, but steps.{column} adds up to {total} "
                                     "records (truncated or inconsistent trace)")
                else:
                    t = np.zeros((H, 0, width), np.float32)
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
    _load_states(f, trace, packing)
    return stored


def _check_recurrent(f: _Container, trace: Any, packing: List[Packing]) -> None:
    """A recurrent layer (layer_kinds) holds no K/V records: no layer{l}.k|v|cache_k|cache_v
    tensor and, in every step, 0 (or null) appended and snapshot columns."""
    kinds = layer_kinds.parse_layer_kinds(trace.extra, f.path, trace.model["num_layers"])
    names = trace.stored_layers()
    for j in layer_kinds.recurrent_layers(kinds, names):
        for column in ("appended", "snapshot_lengths"):
            for i, p in enumerate(packing):
                counts = getattr(p, column)
                if counts is not None and counts[j]:
                    raise TraceError(f.path, f"steps.{column}[{i}]", f"{counts[j]} records on layer "
                                     f"{names[j]}, a recurrent layer (layer_kinds[{names[j]}]): its cache is "
                                     "a recurrent state, it holds no K/V records (0)")
        for kind in ("k", "v", "cache_k", "cache_v"):
            name = f"layer{names[j]}.{kind}"
            if name in f:
                raise TraceError(f.path, name, f"layer {names[j]} is a recurrent layer (layer_kinds"
                                 f"[{names[j]}]): it holds no K/V records, so no such tensor")


STATE_TENSORS = (("conv_state", "[R, C, K]"), ("recurrent_state", "[R, Hv, Dk, Dv]"))
_STATE_NAME = re.compile(r"^layer(\d+)\.(conv_state|recurrent_state)$")


def _load_states(f: _Container, trace: Any, packing: List[Packing]) -> None:
    """The recurrent layers' states (steps.state_row, layer{l}.conv_state F32 [R, C, K],
    layer{l}.recurrent_state F32 [R, Hv, Dk, Dv]): sets Packing.states of each step whose
    state_row names a row. R is the number of steps with a row; their rows are 0, 1, 2, ...
    in step order. Every recurrent layer of the trace has both tensors when R > 0, of one
    shape across layers; no other layer has one."""
    path = f.path
    kinds = layer_kinds.parse_layer_kinds(trace.extra, path, trace.model["num_layers"])
    names = trace.stored_layers()
    recurrent = layer_kinds.recurrent_layers(kinds, names)  # entries
    held = sorted((int(m.group(1)), m.group(2), n) for n in f.entries if (m := _STATE_NAME.match(n)))
    for layer, _, name in held:
        if layer not in [names[j] for j in recurrent]:
            raise TraceError(path, name, f"a state on layer {layer}, which is not a recurrent layer "
                             "(layer_kinds): only a recurrent layer holds a state")
    has_column = any(p.state_row is not None for p in packing)
    if held and not has_column:
        raise TraceError(path, held[0][2], "a state tensor, but the steps have no state_row column "
                         "(which step's state each row is)")
    rows = [-1 if p.state_row is None else p.state_row for p in packing]
    R = sum(1 for r in rows if r >= 0)
    expected = 0
    for i, r in enumerate(rows):
        if r < 0:
            continue
        if r >= R:
            raise TraceError(path, f"steps.state_row[{i}]", f"row {r} is outside [-1, {R}) ({R} steps "
                             "record states; truncated or inconsistent trace)")
        if r != expected:
            raise TraceError(path, f"steps.state_row[{i}]", f"row {r}, but state rows are numbered "
                             f"0, 1, 2, ... in step order: expected {expected}")
        expected += 1
    if R and not recurrent:
        first = next(i for i, r in enumerate(rows) if r >= 0)
        raise TraceError(path, f"steps.state_row[{first}]", "names a state row, but no layer of the "
                         "trace is recurrent (layer_kinds)")
    tables: Dict[int, List[np.ndarray]] = {}
    shapes: Dict[str, tuple] = {}  # kind -> (the first layer's tensor, its shape)
    for j in recurrent:
        for kind, axes in STATE_TENSORS:
            name = f"layer{names[j]}.{kind}"
            if name not in f:
                if R:
                    raise TraceError(path, name, f"missing, but steps.state_row names {R} rows (every "
                                     "recurrent layer holds both conv_state and recurrent_state)")
                continue
            shape = tuple(f.shape(name))
            if f.dtype(name) != "F32":
                raise TraceError(path, name, f"dtype {f.dtype(name)}, expected F32 (states are stored as "
                                 "F32 whatever the K/V dtype)")
            if len(shape) != len(axes.split(",")):
                raise TraceError(path, name, f"shape {list(shape)}, expected {axes}")
            if shape[0] != R:
                raise TraceError(path, name, f"{shape[0]} rows, but steps.state_row names {R} "
                                 "(truncated or inconsistent trace)")
            seen, seen_shape = shapes.setdefault(kind, (name, shape))
            if shape != seen_shape:
                raise TraceError(path, name, f"shape {list(shape)}, but {seen} has {list(seen_shape)} "
                                 "(every recurrent layer's state has one shape)")
            if R:
                tables.setdefault(j, []).append(f.read(name).astype(np.float32))
    for p in packing:
        if p.state_row is not None and p.state_row >= 0:
            p.states = {j: (t[0][p.state_row].copy(), t[1][p.state_row].copy()) for j, t in tables.items()}


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
    _check_recurrent_records(trace)
    c["ring_row"], rings = _ring_rows(trace)
    c["expert_row"], experts = _expert_rows(trace)
    c["state_row"], states = _state_rows(trace)
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
                "ring_row": [-1] * n, "expert_row": [-1] * n, "state_row": [-1] * n}
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
    return c, logits, kv, snaps, sums, rings, experts, states


def _check_recurrent_records(trace: Any) -> None:
    """ValueError for K/V records, a snapshot with columns or a cache length > 0 on a recurrent
    layer (layer_kinds): its cache is a recurrent state, not K/V rows."""
    kinds = layer_kinds.parse_layer_kinds(trace.extra, "", trace.model["num_layers"])
    names = trace.stored_layers()
    for j in layer_kinds.recurrent_layers(kinds, names):
        for i, s in enumerate(trace.steps):
            if j >= len(s.layers):
                continue
            rec = s.layers[j]
            n = max(a.shape[1] if a is not None else 0 for a in (rec.keys, rec.cache_keys))
            if n or rec.cache_length:
                raise ValueError(f"step {i}: layer {names[j]} is a recurrent layer (layer_kinds) and holds "
                                 f"no K/V records, found {n} records, cache length {rec.cache_length}")


def _state_rows(trace: Any):
    """(the state_row column, per recurrent layer (model layer, conv rows, recurrent rows)): a
    step whose recurrent layers hold their states gets the next row, one without -1.
    ValueError for a state on a layer that is not recurrent, a step with the states of only
    some recurrent layers (or a conv state without its recurrent state), or shapes that
    differ between steps or layers."""
    kinds = layer_kinds.parse_layer_kinds(trace.extra, "", trace.model["num_layers"])
    names = trace.stored_layers()
    recurrent = layer_kinds.recurrent_layers(kinds, names)
    column, rows = [], {j: ([], []) for j in recurrent}
    shapes = None
    for i, s in enumerate(trace.steps):
        held = [j for j, rec in enumerate(s.layers) if rec.conv_state is not None or rec.recurrent_state is not None]
        if not held:
            column.append(-1)
            continue
        if held != recurrent:
            raise ValueError(f"step {i}: states on layer entries {held}, but the recurrent layers "
                             f"(layer_kinds) are entries {recurrent}: give a state for every recurrent layer")
        for j in recurrent:
            rec = s.layers[j]
            if rec.conv_state is None or rec.recurrent_state is None:
                raise ValueError(f"step {i}: layer {names[j]} holds a conv state without a recurrent "
                                 "state or the reverse: give both")
            conv = np.ascontiguousarray(rec.conv_state, dtype=np.float32)
            state = np.ascontiguousarray(rec.recurrent_state, dtype=np.float32)
            if conv.ndim != 2 or state.ndim != 3:
                raise ValueError(f"step {i}: layer {names[j]}'s states are {list(conv.shape)} and "
                                 f"{list(state.shape)}, expected [C, K] and [Hv, Dk, Dv]")
            if shapes is None:
                shapes = (conv.shape, state.shape)
            if (conv.shape, state.shape) != shapes:
                raise ValueError(f"step {i}: layer {names[j]}'s states are {list(conv.shape)} and "
                                 f"{list(state.shape)}, earlier ones {list(shapes[0])} and {list(shapes[1])}")
            rows[j][0].append(conv)
            rows[j][1].append(state)
        column.append(len(rows[recurrent[0]][0]) - 1)
    if shapes is None:
        return column, []
    return column, [(names[j], rows[j][0], rows[j][1]) for j in recurrent]


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
    columns, logits, kv, snaps, sums, rings, experts, states = columns_of(trace, checksums)
    tensors = []
    if sums:  # first: U64 rows stay 8-byte aligned whatever the float dtype
        tensors.append(("checksums", np.array(sums, dtype=np.uint64), "U64"))
    if rings:  # then the I32 maps, still 8-byte aligned
        tensors.append(("ring_positions", np.array(rings, dtype=np.int32), "I32"))
    if experts:  # I32 too
        tensors.append(("experts", np.array(experts, dtype=np.int32), "I32"))
    for layer, convs, recurrents in states:  # F32 whatever `dtype`: 4-byte aligned before it
        tensors.append((f"layer{layer}.conv_state", np.stack(convs), "F32"))
        tensors.append((f"layer{layer}.recurrent_state", np.stack(recurrents), "F32"))
    if logits:
        tensors.append(("logits", np.stack(logits), dtype))
    for l, name in enumerate(trace.stored_layers()):  # named by model layer
        for kinds, (ks, vs) in ((("k", "v"), kv[l]), (("cache_k", "cache_v"), snaps[l])):
            if sum(a.shape[1] for a in ks):
                tensors.append((f"layer{name}.{kinds[0]}", np.concatenate(ks, axis=1), dtype))
                tensors.append((f"layer{name}.{kinds[1]}", np.concatenate(vs, axis=1), dtype))
    return columns, tensors
