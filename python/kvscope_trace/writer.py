"""The trace writer: builds a trace step by step (or from a Trace) and writes it as
version 2 (docs/trace-format.md). Part of kvscope_trace.trace's interface; the data model,
the reader and the derivations both format versions share are in trace.py."""

from __future__ import annotations

import copy
import json
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from . import format_v2, layer_kinds, stored_checksums
from .container import STORE_DTYPES, _float32, _is_int, write_safetensors
from .trace import (FORMAT_VERSION, LayerRecord, Step, Trace, _document, _stack_layers, value_dim,
                    cache_checksum, normalize_policy)


def _integer(v) -> bool:
    """A Python or numpy integer (not a bool)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


class TraceWriter:
    """Builds a trace step by step and writes it (docs/trace-format.md).

    `model` needs num_layers, num_kv_heads, head_dim and vocab_size; architecture,
    num_heads, max_positions, fingerprint, directory, stored_dtype and compute_dtype are
    optional. `dtype` is the tensor storage type (F32, F16 or BF16)."""

    def __init__(self, model: Dict[str, Any], engine: str = "kvscope_trace", mode: str = "cached",
                 dtype: str = "F32"):
        if mode not in ("cached", "uncached"):
            raise ValueError(f'mode must be "cached" or "uncached", not {mode!r}')
        if dtype not in STORE_DTYPES:
            raise ValueError(f"dtype must be one of {STORE_DTYPES}, not {dtype!r}")
        self.model = dict(model)
        self.engine, self.mode, self.dtype = engine, mode, dtype
        self.requests: List[Dict[str, Any]] = []
        self.steps: List[Step] = []
        self.events: List[Dict[str, Any]] = []
        self.faults: List[str] = []
        self.extra: Dict[str, Any] = {}
        # A subset of the model's layers (docs/trace-format.md, "recorded_layers"): the model
        # layers the per-layer arguments of add_step stand for, in order. None: every layer.
        self.recorded_layers: Optional[List[int]] = None
        self._state_shape = None  # the (conv, recurrent) state shapes, once a step records states
        self._check_model()

    def _layer_count(self) -> int:
        return len(self.recorded_layers) if self.recorded_layers is not None else self.model["num_layers"]

    def _check_model(self):
        for k, v in self.model.items():  # numpy scalars -> JSON-serialisable Python numbers
            if isinstance(v, np.generic):
                self.model[k] = v.item()
        for k in ("num_layers", "num_kv_heads", "head_dim", "vocab_size"):
            v = self.model.get(k)
            if not _is_int(v) or v <= 0:
                raise ValueError(f"model.{k} must be a positive integer, found {v!r}")
        v = self.model.get("value_head_dim")
        if v is not None and (not _is_int(v) or v <= 0):
            raise ValueError(f"model.value_head_dim must be a positive integer, found {v!r}")
        if v == self.model["head_dim"]:
            del self.model["value_head_dim"]  # the default: files stay as they were

    @classmethod
    def from_trace(cls, trace: Trace, dtype: str = "F32") -> "TraceWriter":
        w = cls(trace.model, engine=trace.engine, mode=trace.mode, dtype=dtype)
        w.requests = copy.deepcopy(trace.requests)
        w.steps = list(trace.steps)
        w.events = copy.deepcopy(trace.events)
        w.faults = list(trace.faults)
        w.extra = dict(trace.extra)
        w.recorded_layers = list(trace.recorded_layers) if trace.recorded_layers is not None else None
        return w

    def add_request(self, id: int, prompt_ids: Sequence[int], generated: Sequence[int] = (),
                    prompt_text: str = "", policy: Optional[Dict[str, Any]] = None,
                    max_new_tokens: int = 0, eos_ids: Sequence[int] = (),
                    stop_reason: str = "unknown", arrival_tick: int = 0,
                    batch_group: int = -1) -> Dict[str, Any]:
        if self.request(id) is not None:
            raise ValueError(f"request {id} was already added")
        V = self.model["vocab_size"]
        prompt_ids = [int(t) for t in prompt_ids]
        bad = [t for t in prompt_ids if not 0 <= t < V]
        if bad:
            raise ValueError(f"request {id}: prompt token {bad[0]} is outside the vocabulary ({V})")
        req = {"id": int(id), "prompt_ids": prompt_ids, "prompt_text": prompt_text,
               "policy": normalize_policy(policy, "", f"request {id} policy"),
               "max_new_tokens": int(max_new_tokens), "eos_ids": [int(t) for t in eos_ids],
               "generated": [int(t) for t in generated], "stop_reason": stop_reason,
               "arrival_tick": int(arrival_tick), "batch_group": int(batch_group)}
        self.requests.append(req)
        return req

    def request(self, rid: int) -> Optional[Dict[str, Any]]:
        return next((r for r in self.requests if r["id"] == rid), None)

    def update_request(self, rid: int, **fields) -> None:
        """E.g. update_request(0, generated=[...], stop_reason="eos") when a request ends."""
        r = self.request(rid)
        if r is None:
            raise ValueError(f"no request {rid}")
        for k, v in fields.items():
            if k == "policy":
                v = normalize_policy(v, "", f"request {rid} policy")
            elif k in ("generated", "prompt_ids", "eos_ids"):
                v = [int(t) for t in v]
            r[k] = v

    def add_event(self, kind: str, tick: int = 0, detail: str = "", weights_version: int = 0,
                  tensor: str = "", scale: float = 0.0, seed: int = 0) -> None:
        self.events.append({"tick": int(tick), "kind": kind, "detail": detail,
                            "weights_version": int(weights_version), "tensor": tensor,
                            "scale": float(scale), "seed": int(seed)})

    def add_step(self, request: int, step: int, fed_ids: Sequence[int], positions: Sequence[int],
                 chosen: int = -1, logits=None, keys=None, values=None, cache_keys=None,
                 cache_values=None, fed_mask: Optional[Sequence[int]] = None,
                 rng_draws_before: int = 0, rng_draws_after: int = 0, weights_version: int = 0,
                 events: Sequence[str] = (), tick: Optional[int] = None, slot: Optional[int] = None,
                 cache_lengths: Optional[Sequence[int]] = None,
                 checksums_k: Optional[Sequence[str]] = None,
                 checksums_v: Optional[Sequence[str]] = None,
                 draft_count: int = 0, accepted_count: int = 0,
                 ring_positions: Optional[Sequence[Sequence[int]]] = None,
                 reused_count: int = 0, reused_from: int = -1,
                 reused_blocks: Optional[Sequence[int]] = None, experts=None,
                 states: Optional[Dict[int, Any]] = None) -> Step:
        """Adds one step. keys/values: per layer [h_kv, s, d] appended records;
        cache_keys/cache_values: per layer [h_kv, t, d] full snapshots (either or both).
        Checksums are computed from the snapshots when xxhash is available and none are
        given. cache_lengths default to what the records imply (as the reader derives).
        Speculative decoding: the last draft_count fed tokens are drafts the step verified,
        the first accepted_count of them accepted (they belong in the request's generated
        tokens, before chosen); the default cache lengths assume the rejected ones were
        rolled back. ring_positions: one slot map (S position ids, -1 empty) per ring layer
        of the trace's layers, in layer order, after the step; set extra["layer_kinds"] first.
        Prefix caching: reused_count N entries came from the prefix cache (prompt_ids[:N] at
        positions 0 .. N-1; fed_ids are the rest), computed for request reused_from (-1:
        unknown; else a request already added) as blocks reused_blocks (ids, informational);
        each layer's keys/values hold the N reused rows first, then the fed tokens' records.
        experts (a mixture of experts): [len(fed_ids), num_layers, K] integers, the experts the
        router chose per fed entry and model layer in its order, -1 for none (a dense layer).
        A recurrent layer (extra["layer_kinds"] kind "recurrent": a state, not K/V rows) gets
        [h_kv, 0, d] arrays and cache length 0 (ValueError otherwise). states: the recurrent
        layers' states after the step, {model layer: (conv [C, K], recurrent [Hv, Dk, Dv])}
        for every recurrent layer of the trace's layers (or None / {}: not recorded); the same
        shapes at every step and layer; stored as F32 (layer{l}.conv_state, .recurrent_state,
        steps.state_row), read back as LayerRecord.conv_state / .recurrent_state."""
        m = self.model
        L, H, D, V = self._layer_count(), m["num_kv_heads"], m["head_dim"], m["vocab_size"]
        if self.request(request) is None:
            raise ValueError(f"step names request {request}, which was not added")
        fed_ids, positions = [int(t) for t in fed_ids], [int(p) for p in positions]
        if len(positions) != len(fed_ids):
            raise ValueError(f"{len(positions)} positions for {len(fed_ids)} fed tokens")
        if fed_mask is not None and len(fed_mask) != len(fed_ids):
            raise ValueError("fed_mask needs one entry per fed token")
        if not 0 <= int(draft_count) <= len(fed_ids) or not 0 <= int(accepted_count) <= int(draft_count):
            raise ValueError(f"draft_count {draft_count} / accepted_count {accepted_count}: need "
                             f"0 <= accepted_count <= draft_count <= {len(fed_ids)} fed tokens")
        if not _integer(reused_count) or reused_count < 0:
            raise ValueError(f"reused_count {reused_count!r}: a non-negative integer (the entries taken "
                             "from the prefix cache)")
        if not _integer(reused_from) or (reused_from != -1 and self.request(int(reused_from)) is None):
            raise ValueError(f"reused_from {reused_from!r}: -1 (unknown) or a request already added")
        if reused_blocks is not None and any(not _integer(b) for b in reused_blocks):
            raise ValueError(f"reused_blocks {list(reused_blocks)!r}: block ids are integers")
        if (keys is None) != (values is None) or (cache_keys is None) != (cache_values is None):
            raise ValueError("give keys with values and cache_keys with cache_values")
        st = Step(request=int(request), step=int(step), fed_ids=fed_ids, positions=positions,
                  tick=len(self.steps) if tick is None else int(tick),
                  slot=int(request) if slot is None else int(slot),
                  fed_mask=[1 if x else 0 for x in fed_mask] if fed_mask is not None else None,
                  chosen=int(chosen), rng_draws_before=int(rng_draws_before),
                  rng_draws_after=int(rng_draws_after), weights_version=int(weights_version),
                  events=list(events), draft_count=int(draft_count),
                  accepted_count=int(accepted_count), reused_count=int(reused_count),
                  reused_from=int(reused_from),
                  reused_blocks=[int(b) for b in reused_blocks]
                  if reused_blocks is not None and len(reused_blocks) else None)
        if experts is not None:
            e = np.asarray(experts)
            if e.ndim != 3 or e.shape[0] != len(fed_ids) or e.shape[1] != m["num_layers"] or \
                    not 1 <= e.shape[2] <= 256 or e.dtype.kind not in "iu" or (e < -1).any():
                raise ValueError(f"experts: shape {list(e.shape)} ({e.dtype}); expected integers >= -1 of "
                                 f"[{len(fed_ids)} fed entries, {m['num_layers']} layers, K <= 256]")
            st.experts = e.astype(np.int32)
        if logits is not None:
            st.logits = _float32(logits, "logits").reshape(-1)
            if st.logits.shape != (V,):
                raise ValueError(f"logits: {st.logits.size} values, model.vocab_size is {V}")
        elif st.chosen >= 0:
            raise ValueError("a step that chose a token needs its logits row")
        k = _stack_layers(keys, L, H, D, "keys")
        Dv = value_dim(m)
        v = _stack_layers(values, L, H, Dv, "values")
        ck = _stack_layers(cache_keys, L, H, D, "cache_keys")
        cv = _stack_layers(cache_values, L, H, Dv, "cache_values")
        if k is not None or ck is not None:
            for l in range(L):
                rec = LayerRecord()
                if k is not None:
                    rec.keys, rec.values = k[l], v[l]
                    if rec.keys.shape[1] != rec.values.shape[1]:
                        raise ValueError(f"layer {l}: keys {list(rec.keys.shape)} and values "
                                         f"{list(rec.values.shape)} hold different numbers of records")
                if ck is not None:
                    rec.cache_keys, rec.cache_values = ck[l], cv[l]
                    if rec.cache_keys.shape[1] != rec.cache_values.shape[1]:
                        raise ValueError(f"layer {l}: cache_keys and cache_values hold different "
                                         "numbers of records")
                    rec.checksum_k = cache_checksum(rec.cache_keys)
                    rec.checksum_v = cache_checksum(rec.cache_values)
                if cache_lengths is not None:
                    rec.cache_length = int(cache_lengths[l])
                if checksums_k is not None and checksums_v is not None:
                    rec.checksum_k, rec.checksum_v = str(checksums_k[l]), str(checksums_v[l])
                st.layers.append(rec)
            if cache_lengths is not None and len(cache_lengths) != L:
                raise ValueError(f"cache_lengths needs {L} entries")
            recurrent = self._recurrent_entries()
            for l in recurrent:
                rec = st.layers[l]
                n = max(a.shape[1] if a is not None else 0 for a in (rec.keys, rec.cache_keys))
                if n or rec.cache_length:
                    raise ValueError(f"layer entry {l} is a recurrent layer (layer_kinds): it holds no K/V "
                                     f"records (give [{H}, 0, {D}] arrays and cache length 0), found {n} "
                                     f"records, cache length {rec.cache_length}")
            short = [l for l, r in enumerate(st.layers) if r.keys is not None and l not in recurrent
                     and r.keys.shape[1] < st.reused_count]
            if short:
                raise ValueError(f"layer {short[0]}: {st.layers[short[0]].keys.shape[1]} records, but the "
                                 f"{st.reused_count} reused rows come first in a hit step's records")
        if ring_positions is not None:
            self._set_ring_maps(st, ring_positions)
        if states:
            self._set_states(st, states)
        self.steps.append(st)
        return st

    def _recurrent_entries(self) -> List[int]:
        """The entries of add_step's per-layer arguments that are recurrent layers (layer_kinds
        in extra): they hold no K/V records."""
        kinds = layer_kinds.parse_layer_kinds(self.extra, "", self.model["num_layers"])
        layers = self.recorded_layers if self.recorded_layers is not None else range(self.model["num_layers"])
        return layer_kinds.recurrent_layers(kinds, list(layers))

    def _state_shapes(self):
        """The (conv, recurrent) state shapes of the steps added so far, None before the first."""
        if self._state_shape is None:
            self._state_shape = next(((r.conv_state.shape, r.recurrent_state.shape) for s in self.steps
                                      for r in s.layers if r.conv_state is not None
                                      and r.recurrent_state is not None), None)
        return self._state_shape

    def _set_states(self, st: Step, states: Dict[int, Any]) -> None:
        """Puts each recurrent layer's (conv, recurrent) state on its record of the step."""
        layers = list(self.recorded_layers) if self.recorded_layers is not None \
            else list(range(self.model["num_layers"]))
        entries = self._recurrent_entries()
        want = [layers[j] for j in entries]
        if not isinstance(states, dict):
            raise ValueError("states: a dict {recurrent layer: (conv [C, K], recurrent [Hv, Dk, Dv])}")
        given = {}
        for layer, pair in states.items():
            if not _integer(layer) or int(layer) not in want:
                raise ValueError(f"states: layer {layer!r} is not a recurrent layer of the trace (layer_kinds "
                                 f"'recurrent' among its layers: {want}; set extra['layer_kinds'] first)")
            given[int(layer)] = pair
        missing = [l for l in want if l not in given]
        if missing:
            raise ValueError(f"states: no state for recurrent layer {missing[0]}: give every recurrent "
                             f"layer's ({want}) or none")
        if not st.layers:
            raise ValueError("states needs the step's layer data (keys/values or cache_keys)")
        shapes, arrays = self._state_shapes(), []
        for j in entries:
            pair = given[layers[j]]
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"states[{layers[j]}]: a pair (conv [C, K], recurrent [Hv, Dk, Dv])")
            conv = np.array(_float32(pair[0], "conv state"), dtype=np.float32, copy=True)
            state = np.array(_float32(pair[1], "recurrent state"), dtype=np.float32, copy=True)
            if conv.ndim != 2 or state.ndim != 3:
                raise ValueError(f"states[{layers[j]}]: shapes {list(conv.shape)} and {list(state.shape)}, "
                                 "expected conv [C, K] and recurrent [Hv, Dk, Dv]")
            if shapes is None:
                shapes = (conv.shape, state.shape)
            if (conv.shape, state.shape) != shapes:
                raise ValueError(f"states[{layers[j]}]: shapes {list(conv.shape)} and {list(state.shape)}, "
                                 f"but the states recorded before are {list(shapes[0])} and {list(shapes[1])} "
                                 "(one shape at every step and layer)")
            arrays.append((j, conv, state))
        for j, conv, state in arrays:  # all checked: set them
            st.layers[j].conv_state, st.layers[j].recurrent_state = conv, state
        self._state_shape = shapes

    def _set_ring_maps(self, st: Step, maps) -> None:
        """Puts one slot map on each ring layer's record of the step (layer_kinds)."""
        kinds = layer_kinds.parse_layer_kinds(self.extra, "", self.model["num_layers"])
        layers = self.recorded_layers if self.recorded_layers is not None else range(self.model["num_layers"])
        rings, S = layer_kinds.ring_layers(kinds, list(layers)), layer_kinds.ring_slots(kinds)
        if not rings:
            raise ValueError("ring_positions needs ring layers: set extra['layer_kinds'] (with "
                             "ring_slots) before add_step")
        if not st.layers:
            raise ValueError("ring_positions needs the step's layer data (keys/values or cache_keys)")
        maps = [np.asarray(m).reshape(-1) for m in maps]
        if len(maps) != len(rings):
            raise ValueError(f"ring_positions: {len(maps)} maps given, the trace has {len(rings)} ring layers")
        for j, m in zip(rings, maps):
            if m.shape != (S,) or not np.issubdtype(m.dtype, np.integer) or (m < -1).any():
                raise ValueError(f"ring_positions: a map holds {S} integer position ids (-1 empty), "
                                 f"found {m.size} of {m.dtype}")
            st.layers[j].ring_positions = [int(x) for x in m]

    def _fill_lengths(self) -> None:
        """Cache lengths the records imply, exactly as the reader derives them."""
        last: Dict[int, List[int]] = {}
        L = self._layer_count()
        for s in self.steps:
            if not s.layers or all(l.keys is None and l.cache_keys is None for l in s.layers):
                continue
            prev = last.setdefault(s.request, [0] * L)
            if "cache_reset" in s.events:
                prev[:] = [0] * L
            for l, rec in enumerate(s.layers):
                if rec.cache_length <= 0:
                    if rec.cache_keys is not None:
                        rec.cache_length = rec.cache_keys.shape[1]
                    else:  # rejected drafts rolled back
                        rolled = s.rejected_count() if rec.keys.shape[1] >= len(s.fed_ids) else 0
                        rec.cache_length = prev[l] + rec.keys.shape[1] - rolled
                prev[l] = rec.cache_length

    def to_trace(self) -> Trace:
        self._check_model()
        self._fill_lengths()
        model = dict(self.model)
        model.setdefault("fingerprint", "")
        model.setdefault("architecture", "")
        model.setdefault("directory", "")
        model.setdefault("num_heads", 0)
        model.setdefault("max_positions", 0)
        model.setdefault("stored_dtype", "")
        model.setdefault("compute_dtype", "float32")
        return Trace(model=model, requests=self.requests, steps=self.steps, engine=self.engine,
                     mode=self.mode, events=self.events, faults=self.faults, extra=self.extra,
                     recorded_layers=self.recorded_layers)

    def save(self, path: str, overwrite: bool = True) -> None:
        """Writes the trace as version 2: the step columns and the packed tensors."""
        trace = self.to_trace()
        # checksums hold for the values as stored: rounded to F16/BF16, some no longer do
        steps, tensors = format_v2.pack(trace, self.dtype, stored_checksums.for_storage(trace, self.dtype))
        meta = {"format": "kvtrace", "kvtrace_version": str(FORMAT_VERSION),
                "kvtrace": json.dumps(_document(trace, steps), separators=(",", ":"), allow_nan=False)}
        write_safetensors(path, tensors, meta, overwrite=overwrite)


def write_trace(trace: Trace, path: str, dtype: str = "F32", overwrite: bool = True) -> None:
    TraceWriter.from_trace(trace, dtype=dtype).save(path, overwrite=overwrite)
