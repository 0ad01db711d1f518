"""Read and write KV Scope traces (`.kvtrace`, docs/trace-format.md) with numpy alone.

A trace is a plain safetensors file: an 8-byte little-endian header length, a JSON header
(padded with spaces so the data starts 8-byte aligned), then the tensor bytes. The header's
`__metadata__` holds `format: "kvtrace"`, `kvtrace_version: "2"` and the trace document
(`kvtrace`, a JSON string) whose `steps` are JSON columns. The per-step data is packed:
`logits` [R, V], `layer{l}.k|v` (the appended records of every step, concatenated along
axis 1), optional `layer{l}.cache_k|cache_v` (full snapshots), `checksums` (U64) and a
recurrent layer's states (`layer{l}.conv_state|recurrent_state`, F32, `steps.state_row`).
Writers write version 2; read_trace also reads version 1 (format_v1.py). The layout of
version 2 is in format_v2.py; this module holds the data model, the step fields and the
derivations both versions share, and the writer. The command line (`kvtrace`) is cli.py.

    from kvscope_trace import TraceWriter, read_trace
    w = TraceWriter(model={"architecture": "llama", "num_layers": 3, "num_kv_heads": 2,
                           "head_dim": 16, "vocab_size": 1200, "max_positions": 128})
    w.add_request(0, prompt_ids=[0, 34, 86], generated=[422], max_new_tokens=1)
    w.add_step(request=0, step=0, fed_ids=[0, 34, 86], positions=[0, 1, 2], chosen=422,
               logits=row, keys=[k0, k1, k2], values=[v0, v1, v2])
    w.save("run.kvtrace")
    t = read_trace("run.kvtrace")        # validated like the C++ reader (TraceError)

XXH3-64 cache checksums are computed only when the `xxhash` module is importable
(KVSCOPE_TRACE_XXHASH=0: never, =1: required); otherwise they are omitted (they are
optional in the format). In F16/BF16 files they hash the stored, rounded values
(stored_checksums.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
from typing import Any, Dict, List, Optional

import numpy as np

from . import format_v1, format_v2, kv_cache, layer_kinds, rope
from .container import (MAX_HEADER_BYTES, STORE_DTYPES, TraceError, _Container,  # noqa: F401
                        _DTYPES, _Obj, _columns, _encode, _float32, _is_int, _to_bf16_bits,
                        write_safetensors)

# Optional: checksums are left out without it. KVSCOPE_TRACE_XXHASH=0 leaves it out even
# when it is installed and =1 requires it (the test suite runs both ways, so that the
# environment cannot change what a trace says).
_XXHASH_MODE = os.environ.get("KVSCOPE_TRACE_XXHASH", "")
_xxhash = None
if _XXHASH_MODE != "0":
    try:
        import xxhash as _xxhash  # type: ignore
    except ImportError:  # pragma: no cover - depends on the environment
        if _XXHASH_MODE == "1":
            raise ImportError("KVSCOPE_TRACE_XXHASH=1 but the xxhash module is not installed "
                              "(Debian: python3-xxhash; pip install xxhash)") from None

FORMAT_VERSION = format_v2.VERSION  # what the writers write; read_trace also reads 1
HAVE_XXHASH = _xxhash is not None


@dataclasses.dataclass
class LayerRecord:
    """One layer of one step. Arrays are float32 [h_kv, s, d] / [h_kv, t, d] or None."""
    cache_length: int = 0
    keys: Optional[np.ndarray] = None          # appended records
    values: Optional[np.ndarray] = None
    cache_keys: Optional[np.ndarray] = None    # full snapshot after the step
    cache_values: Optional[np.ndarray] = None
    checksum_k: Optional[str] = None           # XXH3-64 hex of the whole row after the step
    checksum_v: Optional[str] = None
    derived: bool = False                      # keys/values derived from the snapshots on read
    # a ring layer's slot map after the step (layer_kinds, ring_positions): the position id
    # each of its S physical slots holds, -1 empty; None: not recorded or not a ring layer
    ring_positions: Optional[List[int]] = None
    # a recurrent layer's state after the step (layer_kinds "recurrent", steps.state_row):
    # the causal conv's last K inputs float32 [C, K] (transformers' conv_states) and the
    # recurrent state float32 [Hv, Dk, Dv] (recurrent_states); None: not recorded
    conv_state: Optional[np.ndarray] = None
    recurrent_state: Optional[np.ndarray] = None


@dataclasses.dataclass
class Step:
    request: int
    step: int
    fed_ids: List[int]
    positions: List[int]
    tick: int = 0
    slot: int = 0
    fed_mask: Optional[List[int]] = None
    chosen: int = -1
    rng_draws_before: int = 0
    rng_draws_after: int = 0
    weights_version: int = 0
    events: List[str] = dataclasses.field(default_factory=list)
    # speculative decoding: the last draft_count fed entries are drafts, the first
    # accepted_count of them accepted (stream tokens); the rest are rolled back
    draft_count: int = 0
    accepted_count: int = 0
    # prefix caching: the first reused_count cache entries (the request's first stream
    # tokens, before the fed ones; the records hold them first) came from the engine's
    # prefix cache, computed for request reused_from (-1: unknown) as blocks reused_blocks
    reused_count: int = 0
    reused_from: int = -1
    reused_blocks: Optional[List[int]] = None
    logits: Optional[np.ndarray] = None        # float32 [V]
    layers: List[LayerRecord] = dataclasses.field(default_factory=list)
    # a mixture of experts: per fed entry and model layer the experts the router chose,
    # int32 [len(fed_ids), num_layers, K], -1 for none (a dense layer, an unused slot)
    experts: Optional[np.ndarray] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)  # unknown keys, kept

    def rejected_count(self) -> int:
        return max(0, self.draft_count - self.accepted_count)

    def real_fed_count(self) -> int:
        """Fed entries that are stream tokens: not padding, not rejected drafts."""
        kept = len(self.fed_ids) - self.rejected_count()
        return kept if not self.fed_mask else int(sum(1 for m in self.fed_mask[:kept] if m))


@dataclasses.dataclass
class Trace:
    model: Dict[str, Any]
    requests: List[Dict[str, Any]]
    steps: List[Step]
    version: int = FORMAT_VERSION
    engine: str = "unknown"
    mode: str = "cached"
    events: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    faults: List[str] = dataclasses.field(default_factory=list)
    # Per fault whether and where it fired ({"fired", "request", "step", "layer"} or
    # {"fired": false, "reason"}); None: not recorded (traces from before the record).
    fault_firings: Optional[List[Dict[str, Any]]] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)  # unknown keys, kept
    stored_dtypes: List[str] = dataclasses.field(default_factory=list)  # tensor dtypes on read
    # A trace of some of the model's layers (a minimized reproducer; docs/trace-format.md,
    # "recorded_layers"): the model layers the steps' `layers` entries stand for, in order
    # (step.layers[j] is layer recorded_layers[j]). None: every layer.
    recorded_layers: Optional[List[int]] = None

    def request(self, rid: int) -> Optional[Dict[str, Any]]:
        return next((r for r in self.requests if r["id"] == rid), None)

    def steps_of(self, rid: int) -> List[Step]:
        return sorted((s for s in self.steps if s.request == rid), key=lambda s: s.step)

    def has_snapshots(self) -> bool:
        return any(l.cache_keys is not None for s in self.steps for l in s.layers)

    def stored_layers(self) -> List[int]:
        """The model layer of each entry of a step's `layers`: recorded_layers or all."""
        if self.recorded_layers is not None:
            return list(self.recorded_layers)
        return list(range(self.model["num_layers"]))


# ----------------------------------------------------------------------------- helpers

def cache_checksum(array) -> Optional[str]:
    """XXH3-64 (16 hex digits) of a [h_kv, t, d] cache row as little-endian float32, or
    None when the xxhash module is not available."""
    if _xxhash is None:
        return None
    data = np.ascontiguousarray(np.asarray(array, dtype="<f4"))
    return f"{_xxhash.xxh3_64_intdigest(data.tobytes()):016x}"


def _weight_files(directory: str) -> List[str]:
    """The checkpoint's weight files, as KV Scope's Checkpoint picks them."""
    index = os.path.join(directory, "model.safetensors.index.json")
    single = os.path.join(directory, "model.safetensors")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(directory, s) for s in shards]
    if os.path.exists(single):
        return [single]
    found = [n for n in os.listdir(directory) if n.endswith(".safetensors")]
    if len(found) != 1:
        raise TraceError(directory, "", "no model.safetensors or model.safetensors.index.json found")
    return [os.path.join(directory, found[0])]


def model_fingerprint(directory: str) -> str:
    """The fingerprint KV Scope records for a model directory (Checkpoint::fingerprint):
    sha256 over, for config.json and then every weight file sorted by path, the file name
    followed by the file's bytes. A GGUF file is its own config and weights."""
    h = hashlib.sha256()
    paths = [directory] if _is_gguf(directory) else \
        [os.path.join(directory, "config.json")] + sorted(_weight_files(directory))
    for path in paths:
        h.update(os.path.basename(path).encode())
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _is_gguf(path: str) -> bool:
    return path.endswith(".gguf") and os.path.isfile(path)


def model_stored_dtype(directory: str) -> str:
    """F32 / F16 / BF16 when every float weight has that dtype, "mixed" or "none"
    otherwise (Checkpoint::storedDtype); reads the safetensors headers only. A GGUF file:
    "GGUF" (KV Scope names its ggml types when it opens it)."""
    if _is_gguf(directory):
        return "GGUF"
    found = set()
    for path in _weight_files(directory):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        found |= {e.get("dtype") for k, e in header.items() if k != "__metadata__"} & set(STORE_DTYPES)
    return found.pop() if len(found) == 1 else ("mixed" if found else "none")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ----------------------------------------------------------------------------- document

def normalize_policy(p: Any, file: str = "", where: str = "policy") -> Dict[str, Any]:
    """Validates a sampling policy (docs/sampling-policy.md) and fills the defaults."""
    def bad(k, what):
        raise TraceError(file, f"{where}.{k}" if k else where, what)
    if p is None:
        p = {"temperature": 0.0}
    if not isinstance(p, dict):
        bad("", "expected a JSON object")
    t = p.get("temperature")
    if not _is_number(t):
        bad("temperature", "expected a number (0 = greedy)")
    out = {"temperature": float(t), "top_k": None, "top_p": None, "seed": 0, "tie_rule": "lowest"}
    if p.get("top_k") is not None:
        if not _is_int(p["top_k"]):
            bad("top_k", "expected an integer or null")
        out["top_k"] = p["top_k"]
    if p.get("top_p") is not None:
        if not _is_number(p["top_p"]):
            bad("top_p", "expected a number or null")
        out["top_p"] = float(p["top_p"])
    if p.get("seed") is not None:
        if not _is_int(p["seed"]) or p["seed"] < 0:
            bad("seed", "expected a non-negative integer")
        out["seed"] = p["seed"]
    if p.get("tie_rule") is not None:
        if p["tie_rule"] not in ("lowest", "highest"):
            bad("tie_rule", 'expected "lowest" or "highest"')
        out["tie_rule"] = p["tie_rule"]
    if p.get("generator") is not None:
        if not isinstance(p["generator"], str) or not p["generator"]:
            bad("generator", 'expected a generator name such as "kvscope" or "torch"')
        out["generator"] = p["generator"]
    temp = out["temperature"]
    if temp != temp or temp in (float("inf"), float("-inf")) or temp < 0:
        bad("", f"temperature {temp} must be finite and >= 0 (0 = greedy)")
    if out["top_k"] is not None and out["top_k"] < 1:
        bad("", f"top-k {out['top_k']} is below 1; use an integer >= 1 or leave top-k unset")
    if out["top_p"] is not None and not (0.0 < out["top_p"] <= 1.0):
        bad("", f"top-p {out['top_p']} is outside (0, 1]; use a value in (0, 1] or leave top-p unset")
    return out


def parse_document(doc: Any, file: str = "") -> Trace:
    """The trace document (without tensors), validated like detail::traceFromJson."""
    return _parse_document(doc, file)[0]


def _parse_document(doc: Any, file: str):
    """(Trace, per-step format_v2.Packing for version 2 or None for version 1)."""
    if not isinstance(doc, dict):
        raise TraceError(file, "kvtrace", "expected a JSON object")
    top = _Obj(doc, file, "")
    version = top.integer("version")
    if version not in (1, FORMAT_VERSION):
        top.fail("version", f"trace document version {version} is not supported (expected 1 or "
                 f"{FORMAT_VERSION})")
    mode = top.string("mode", "cached")
    if mode not in ("cached", "uncached"):
        top.fail("mode", 'expected "cached" or "uncached"')
    m = _Obj(top.child("model"), file, "model")
    if not isinstance(m.j, dict):
        top.fail("model", "expected a JSON object")
    model = dict(m.j)
    for k in ("fingerprint", "architecture", "directory", "stored_dtype"):
        model[k] = m.string(k)
    model["compute_dtype"] = m.string("compute_dtype", "float32")
    for k in ("num_layers", "num_kv_heads", "head_dim", "vocab_size"):
        model[k] = m.integer(k)
    for k in ("num_heads", "max_positions"):
        model[k] = m.integer(k, 0)
    if min(model["num_layers"], model["num_kv_heads"], model["head_dim"], model["vocab_size"]) <= 0:
        raise TraceError(file, "model", "num_layers, num_kv_heads, head_dim and vocab_size must be positive")
    if "value_head_dim" in m.j:
        model["value_head_dim"] = m.integer("value_head_dim")
        if model["value_head_dim"] <= 0:
            raise TraceError(file, "model.value_head_dim", "must be positive")
    if "latent_records" in m.j and m.j["latent_records"] not in ("latent", "heads"):
        raise TraceError(file, "model.latent_records", f"{m.j['latent_records']!r}: expected \"latent\" (latent rows "
                         "and roped key parts) or \"heads\" (each head's decompressed key and value)")
    rope.parse_rope(model, file)  # kept in `model`, validated here
    V = model["vocab_size"]
    recorded = _recorded_layers(top, model["num_layers"])
    kv_cache.parse_kv_cache(doc, file, model["num_layers"])  # kept in `extra`, validated here
    layer_kinds.parse_layer_kinds(doc, file, model["num_layers"])  # likewise
    if recorded is not None and version == 1:
        top.fail("recorded_layers", 'a layer subset needs format version 2 (kvtrace_version "2")')
    L = len(recorded) if recorded is not None else model["num_layers"]

    reqs = top.child("requests")
    if not isinstance(reqs, list):
        top.fail("requests", "expected an array")
    requests = []
    for i, rj in enumerate(reqs):
        r = _Obj(rj, file, f"requests[{i}]")
        req = dict(rj) if isinstance(rj, dict) else {}
        req["id"] = r.integer("id")
        req["prompt_ids"] = r.ints("prompt_ids")
        req["prompt_text"] = r.string("prompt_text")
        req["policy"] = normalize_policy(rj.get("policy"), file, r.at("policy"))
        req["max_new_tokens"] = r.integer("max_new_tokens", 0)
        req["eos_ids"] = r.ints("eos_ids", False)
        req["generated"] = r.ints("generated")
        req["stop_reason"] = r.string("stop_reason", "unknown")
        req["arrival_tick"] = r.integer("arrival_tick", 0)
        req["batch_group"] = r.integer("batch_group", -1)
        for t in req["prompt_ids"]:
            if not 0 <= t < V:
                r.fail("prompt_ids", f"token id {t} is outside the vocabulary")
        requests.append(req)
    ids = {r["id"] for r in requests}

    def parse_step(s: _Obj, i: int) -> Step:
        return _parse_step(s, i, ids, L, version)
    packing = None
    if version == 1:
        steps = format_v1.parse_steps(top.child("steps"), file, parse_step)
    else:
        steps, packing = format_v2.parse_columns(top.child("steps"), file, parse_step, L)

    events = []
    for i, ej in enumerate(doc.get("events") or []):
        e = _Obj(ej, file, f"events[{i}]")
        ev = dict(ej) if isinstance(ej, dict) else {}
        ev["tick"] = e.integer("tick", 0)
        ev["kind"] = e.string("kind")
        ev["detail"] = e.string("detail")
        ev["weights_version"] = e.integer("weights_version", 0)
        ev["tensor"] = e.string("tensor")
        if e.has("scale") and not _is_number(ej["scale"]):
            e.fail("scale", "expected a number")
        ev["scale"] = float(ej["scale"]) if e.has("scale") else 0.0
        ev["seed"] = e.integer("seed", 0)
        events.append(ev)
    extra = {k: v for k, v in doc.items()
             if k not in ("version", "engine", "mode", "model", "requests", "steps", "events", "faults",
                          "fault_firings", "recorded_layers")}
    firings = doc.get("fault_firings")
    if firings is not None and (not isinstance(firings, list) or
                                not all(isinstance(f, dict) and isinstance(f.get("fired"), bool)
                                        for f in firings)):
        top.fail("fault_firings", "expected an array of objects with a boolean 'fired'")
    trace = Trace(model=model, requests=requests, steps=steps, version=version,
                  engine=top.string("engine", "unknown"), mode=mode, events=events,
                  faults=top.strings("faults"), extra=extra, recorded_layers=recorded,
                  fault_firings=firings)
    return trace, packing


def _recorded_layers(top: _Obj, num_layers: int) -> Optional[List[int]]:
    """The document's recorded_layers (None when absent), validated like the C++ reader:
    one or more layer indices, each in [0, num_layers), strictly increasing."""
    if not top.has("recorded_layers"):
        return None
    layers = top.ints("recorded_layers")
    if not layers:
        top.fail("recorded_layers", "expected one or more layer indices (leave the field out when "
                 "the trace holds every layer)")
    for i, l in enumerate(layers):
        if not 0 <= l < num_layers:
            raise TraceError(top.file, f"recorded_layers[{i}]", f"layer {l} is outside the model's "
                             f"layers 0..{num_layers - 1} (model.num_layers {num_layers})")
        if i and l <= layers[i - 1]:
            raise TraceError(top.file, f"recorded_layers[{i}]", f"layer {l} after layer "
                             f"{layers[i - 1]}: the layer indices must be strictly increasing")
    return layers


def _parse_step(s: _Obj, i: int, ids, L: int, version: int) -> Step:
    """The step fields both versions share; `s` names fields as steps[i].x (version 1) or
    steps.x[i] (version 2). The layers hold the declared cache lengths, if any. The
    speculative (draft_count, accepted_count) and prefix-cache (reused_*) columns are
    version 2's: in a version 1 step they are ignored (kept in Step.extra), as by the C++
    reader."""
    request = s.integer("request")
    if request not in ids:
        s.fail("request", f"names request {request} which is not in requests")
    st = Step(request=request, step=s.integer("step"), fed_ids=s.ints("fed_ids"),
              positions=s.ints("positions"))
    st.tick = s.integer("tick", i)
    st.slot = s.integer("slot", request)
    if len(st.positions) != len(st.fed_ids):
        s.fail("positions", f"{len(st.positions)} positions for {len(st.fed_ids)} fed tokens")
    mask = [1 if x else 0 for x in s.ints("fed_mask", False)]
    if mask and len(mask) != len(st.fed_ids):
        s.fail("fed_mask", "one entry per fed token expected")
    st.fed_mask = mask or None
    st.chosen = s.integer("chosen", -1)
    st.rng_draws_before = s.integer("rng_draws_before", 0)
    st.rng_draws_after = s.integer("rng_draws_after", 0)
    st.weights_version = s.integer("weights_version", 0)
    st.events = s.strings("events")
    if version >= 2:
        _parse_drafts(s, st)
        _parse_reuse(s, st, ids)
    lengths = s.ints("cache_lengths", False)
    if lengths and len(lengths) != L:
        s.fail("cache_lengths", f"one entry per layer expected ({L})")
    st.layers = [LayerRecord(cache_length=n) for n in lengths]
    return st


def _parse_drafts(s: _Obj, st: Step) -> None:
    """Speculative decoding: draft_count in [0, fed], accepted_count in [0, draft_count]."""
    st.draft_count = s.integer("draft_count", 0)
    if not 0 <= st.draft_count <= len(st.fed_ids):
        s.fail("draft_count", f"{st.draft_count} is outside [0, {len(st.fed_ids)}] (the fed tokens)")
    st.accepted_count = s.integer("accepted_count", 0)
    if not 0 <= st.accepted_count <= st.draft_count:
        s.fail("accepted_count", f"{st.accepted_count} is outside [0, {st.draft_count}] (draft_count)")


MAX_REUSED = 1 << 28  # the longest prefix-cache hit the C++ reader takes (a cache length)


def _parse_reuse(s: _Obj, st: Step, ids) -> None:
    """A prefix-cache hit (docs/trace-format.md, "Prefix-cache hits"): reused_count in
    [0, 2^28], reused_from -1 or a request of the trace, reused_blocks null or integers."""
    st.reused_count = s.integer("reused_count", 0)
    if not 0 <= st.reused_count <= MAX_REUSED:
        s.fail("reused_count", f"{st.reused_count} is outside [0, {MAX_REUSED}] (the cache entries "
               "taken from the prefix cache)")
    st.reused_from = s.integer("reused_from", -1)
    if st.reused_from != -1 and st.reused_from not in ids:
        s.fail("reused_from", f"names request {st.reused_from} which is not in requests (-1: unknown)")
    blocks = s.ints("reused_blocks", False)
    st.reused_blocks = blocks or None


def document(trace: Trace) -> Dict[str, Any]:
    """The JSON trace document of `trace` (the inverse of parse_document), version 2."""
    return _document(trace, format_v2.columns_of(trace)[0])


def _document(trace: Trace, steps: Dict[str, Any]) -> Dict[str, Any]:
    doc = dict(trace.extra)
    doc.update({"version": FORMAT_VERSION, "engine": trace.engine, "mode": trace.mode,
                "model": trace.model, "requests": trace.requests, "steps": steps})
    doc["events"] = trace.events
    doc["faults"] = trace.faults
    if trace.fault_firings is not None:
        doc["fault_firings"] = trace.fault_firings
    if trace.recorded_layers is not None:
        doc["recorded_layers"] = [int(l) for l in trace.recorded_layers]
    return doc


# ----------------------------------------------------------------------------- read

def read_trace(path: str) -> Trace:
    """Reads and validates a trace of version 2 or 1 (TraceError, a ValueError, names the
    file and field). Full-snapshot traces get their appended records derived from the
    snapshots."""
    f = _Container(path)
    meta = f.metadata
    if meta.get("format") != "kvtrace":
        raise TraceError(path, "__metadata__.format",
                         'not a KV Scope trace (expected "kvtrace"; see docs/trace-format.md)')
    ver = meta.get("kvtrace_version")
    if ver not in ("1", str(FORMAT_VERSION)):
        raise TraceError(path, "__metadata__.kvtrace_version",
                         f"trace format version {ver if ver is not None else '(missing)'} is not "
                         f"supported (this build reads versions 1 and {FORMAT_VERSION})")
    if "kvtrace" not in meta:
        raise TraceError(path, "__metadata__.kvtrace", "missing trace document")
    try:
        doc = json.loads(meta["kvtrace"])
    except json.JSONDecodeError as e:
        raise TraceError(path, "__metadata__.kvtrace", f"invalid JSON: {e}") from None
    if isinstance(doc, dict) and _is_int(doc.get("version")) and str(doc["version"]) != ver:
        raise TraceError(path, "version", f"trace document version {doc['version']} does not match "
                         f"__metadata__.kvtrace_version {ver}")
    trace, packing = _parse_document(doc, path)
    if trace.version == 1:
        stored = format_v1.load_tensors(f, trace)
    else:
        stored = format_v2.load_packed(f, trace, packing)
        for s, p in zip(trace.steps, packing):
            if p.checksums:
                s.layers = s.layers or [LayerRecord() for _ in range(len(p.checksums))]
                for rec, (k, v) in zip(s.layers, p.checksums):
                    rec.checksum_k, rec.checksum_v = k, v
            if p.ring:
                s.layers = s.layers or [LayerRecord() for _ in range(len(p.ring))]
                for rec, ring in zip(s.layers, p.ring):
                    rec.ring_positions = ring
            if p.states:
                s.layers = s.layers or [LayerRecord() for _ in range(len(trace.stored_layers()))]
                for j, (conv, state) in p.states.items():
                    s.layers[j].conv_state, s.layers[j].recurrent_state = conv, state
    _attach_layers(trace, stored, path)
    trace.stored_dtypes = sorted(f.float_dtypes)
    return trace


def _attach_layers(trace: Trace, stored: List[Optional[list]], path: str) -> None:
    """Both versions: gives each step with layer data (stored[i], per layer [keys, values,
    cache_keys, cache_values]) its LayerRecords, keeping the declared cache lengths and
    checksums. A layer with a snapshot alone gets as appended records the snapshot columns
    new since the request's previous step (all of them after a cache_reset); a cache length
    not declared is the snapshot's, else the previous length plus the appended count. A
    prefix-cache hit needs its reused rows among each layer's records (TraceError), except on a
    recurrent layer (layer_kinds), which holds no records and has cache length 0."""
    L = len(trace.stored_layers())
    names = trace.stored_layers()
    kinds = layer_kinds.parse_layer_kinds(trace.extra, path, trace.model["num_layers"])
    recurrent = set(layer_kinds.recurrent_layers(kinds, names))
    last: Dict[int, List[int]] = {}  # request -> per-layer cache length so far
    for i, (s, layers) in enumerate(zip(trace.steps, stored)):
        if layers is None:
            continue
        prev = last.setdefault(s.request, [0] * L)
        if "cache_reset" in s.events:
            prev[:] = [0] * L
        declared = s.layers
        s.layers = []
        for l, (k, v, ck, cv) in enumerate(layers):
            rec = LayerRecord(keys=k, values=v, cache_keys=ck, cache_values=cv)
            if l < len(declared):
                rec.checksum_k, rec.checksum_v = declared[l].checksum_k, declared[l].checksum_v
                rec.ring_positions = declared[l].ring_positions
                rec.conv_state, rec.recurrent_state = declared[l].conv_state, declared[l].recurrent_state
            if k is None:
                t = ck.shape[1]
                start = min(prev[l], t)
                rec.keys, rec.values = _columns(ck, start, t), _columns(cv, start, t)
                rec.derived = True
            if l in recurrent:
                _check_recurrent_step(trace, path, i, l, rec, declared)
            elif s.reused_count > rec.keys.shape[1]:
                raise TraceError(path, f"steps.reused_count[{i}]", f"{s.reused_count} entries taken from "
                                 f"the prefix cache, but layer {trace.stored_layers()[l]} of the step has "
                                 f"{rec.keys.shape[1]} records (a hit step's records start with the "
                                 "reused rows)")
            if l < len(declared) and declared[l].cache_length > 0:
                rec.cache_length = declared[l].cache_length
            elif ck is not None:
                rec.cache_length = ck.shape[1]
            else:  # a speculative step rolled its rejected drafts back
                rolled = s.rejected_count() if rec.keys.shape[1] >= len(s.fed_ids) else 0
                rec.cache_length = prev[l] + rec.keys.shape[1] - rolled
            prev[l] = rec.cache_length
            s.layers.append(rec)


def _check_recurrent_step(trace: Trace, path: str, i: int, l: int, rec: LayerRecord,
                          declared: List[LayerRecord]) -> None:
    """Step i's entry l is a recurrent layer: no records (version 1 names its tensors; version
    2's were checked by format_v2) and no declared cache length."""
    layer = trace.stored_layers()[l]
    for kind, a in (("k", rec.keys), ("cache_k", rec.cache_keys)):
        if a is not None and a.shape[1]:
            raise TraceError(path, f"step{i}.layer{layer}.{kind}" if trace.version == 1 else f"layer{layer}.{kind}",
                             f"{a.shape[1]} records on layer {layer}, a recurrent layer (layer_kinds"
                             f"[{layer}]): it holds no K/V records")
    if l < len(declared) and declared[l].cache_length > 0:
        field = f"steps[{i}].cache_lengths" if trace.version == 1 else f"steps.cache_lengths[{i}]"
        raise TraceError(path, field, f"cache length {declared[l].cache_length} on layer {layer}, a recurrent "
                         f"layer (layer_kinds[{layer}]): it holds no K/V rows (0)")


# ----------------------------------------------------------------------------- write

def value_dim(model: Dict[str, Any]) -> int:
    """A value record's width: model.value_head_dim where given (MLA: the roped key part beside
    the latent keys), else head_dim."""
    return model.get("value_head_dim") or model["head_dim"]


def _stack_layers(arrays, L: int, H: int, D: int, what: str) -> Optional[List[np.ndarray]]:
    if arrays is None:
        return None
    if isinstance(arrays, np.ndarray) and arrays.ndim == 4 and arrays.shape[0] == L:
        arrays = list(arrays)
    arrays = list(arrays)
    if len(arrays) != L:
        raise ValueError(f"{what}: {len(arrays)} layers given, the model has {L}")
    out = []
    for l, a in enumerate(arrays):
        a = _float32(a, what)
        if a.ndim == 4 and a.shape[0] == 1:  # a batch of one
            a = a[0]
        if a.ndim != 3 or a.shape[0] != H or a.shape[2] != D:
            raise ValueError(f"{what}[{l}]: shape {list(a.shape)}, expected [{H}, t, {D}] "
                             "(num_kv_heads, records, head_dim)")
        out.append(np.ascontiguousarray(a))
    return out


# The writer lives in writer.py; it is part of this module's interface.
from .writer import TraceWriter, write_trace  # noqa: E402,F401
