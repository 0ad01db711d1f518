#!/usr/bin/env python3
"""Record a KV Scope trace (docs/trace-format.md) from any transformers causal LM.

    kvscope-record --model DIR --prompt TEXT [--prompt TEXT ...] --max-new N \
        [--temperature T --top-k K --top-p P --seed S] [--snapshots] [--uncached] \
        [--state-every N] --out FILE.kvtrace

The decode loop feeds the prompt once (step 0), then one generated token per step with the
cache the model returned (`past_key_values`), passing explicit `position_ids` (and
`cache_position` where the model takes it). After every step it reads the cache through a
small adapter (`cache_layers`: transformers 5 `cache.layers[i].keys/.values`, transformers 4
`cache.key_cache[i]/value_cache[i]`, legacy tuples) and records the columns that are new since
the previous step as the step's appended records (and the whole cache with --snapshots).
A recurrent layer (Qwen3.5's Gated DeltaNet: transformers' `LinearAttentionLayer`, a conv and
a recurrent state instead of K/V rows) is recorded as layer_kinds "recurrent", with no records;
its state after the step (`conv_states[0]` [B, C, K] and `recurrent_states[0]` [B, Hv, Dk, Dv],
the request's row, as float32) is recorded at the prefill and every N-th decode step
(`--state-every N`, default 1: every step; 0: never; none in --uncached mode).
`--uncached` recomputes the whole prefix every step with no cache carried over (mode
"uncached", recorded like KV Scope's own reference engine).

Tokens are chosen with KV Scope's sampling policy and generator (docs/sampling-policy.md:
transformers' warper order, std::mt19937_64 seeded per request, one draw per sampled token),
so `kvscope-cli audit` can replay a sampled run straight from its seed.

torch and transformers are imported inside main(); the recording logic (TraceRecorder, the
decode loop `decode`, the sampler) needs numpy only, so it is testable without them.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import __version__
from . import trace as kvtrace

ENGINE = "kvscope-record"
MASK64 = (1 << 64) - 1


# ----------------------------------------------------------------------------- cache adapter

def _empty(t) -> bool:
    if t is None:
        return True
    shape = getattr(t, "shape", None)
    return shape is None or len(shape) < 3 or int(np.prod(shape)) == 0


def is_recurrent_layer(layer) -> bool:
    """A transformers 5 cache layer that keeps a recurrent state instead of K/V rows
    (`LinearAttentionLayer`: Qwen3.5's and Qwen3-Next's Gated DeltaNet layers, `conv_states` /
    `recurrent_states`). A layer that also keeps K/V (LinearAttentionAndFullAttentionLayer) is
    not: its rows are recorded."""
    return not hasattr(layer, "keys") and (hasattr(layer, "recurrent_states") or hasattr(layer, "conv_states"))


def recurrent_layers(cache, layer_types: Optional[Sequence[str]] = None) -> List[int]:
    """The cache's recurrent layers (no K/V rows, a state): transformers 5's
    `LinearAttentionLayer`s, or (transformers 4's Qwen3-Next cache, with key_cache lists) the
    "linear_attention" entries of the cache's or the config's layer_types."""
    if cache is None:
        return []
    inner = getattr(cache, "self_attention_cache", None)
    if inner is not None:
        return recurrent_layers(inner, layer_types)
    layers = getattr(cache, "layers", None)
    if isinstance(layers, (list, tuple)):
        return [i for i, l in enumerate(layers) if is_recurrent_layer(l)]
    types = getattr(cache, "layer_types", None) or layer_types
    if getattr(cache, "key_cache", None) is None or not types:
        return []
    return [i for i, t in enumerate(types) if t == "linear_attention"]


def cache_layers(cache) -> List[Tuple[Any, Any]]:
    """Per layer (keys, values) of a transformers cache, tensors [B, h_kv, t, d] (or None
    for a layer that holds nothing yet, and for a recurrent layer, which holds a state and
    no rows). Handles transformers 5 (`cache.layers[i].keys / .values`, also 4.56+),
    transformers 4 (`cache.key_cache[i] / value_cache[i]`), legacy tuple caches
    (`((k, v), ...)`) and encoder-decoder caches (their self-attention part)."""
    if cache is None:
        return []
    inner = getattr(cache, "self_attention_cache", None)
    if inner is not None:  # EncoderDecoderCache
        return cache_layers(inner)
    layers = getattr(cache, "layers", None)
    if isinstance(layers, (list, tuple)) and all((hasattr(l, "keys") and hasattr(l, "values"))
                                                 or is_recurrent_layer(l) for l in layers):
        out = []
        for l in layers:
            if is_recurrent_layer(l):
                out.append((None, None))
                continue
            k, v = l.keys, l.values
            if callable(k):  # a dict-like layer object, not a cache layer
                break
            out.append((None, None) if _empty(k) else (k, v))
        else:
            return out
    kc, vc = getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)
    if kc is not None and vc is not None:
        return [((None, None) if _empty(k) else (k, v)) for k, v in zip(kc, vc)]
    if isinstance(cache, (list, tuple)):
        out = []
        for i, entry in enumerate(cache):
            if not isinstance(entry, (list, tuple)) or len(entry) < 2:
                raise TypeError(f"legacy cache layer {i} is not a (key, value) pair")
            k, v = entry[0], entry[1]
            out.append((None, None) if _empty(k) else (k, v))
        return out
    raise TypeError(f"unsupported cache type {type(cache).__name__}: expected a transformers Cache "
                    "(layers / key_cache) or a tuple of (key, value) pairs")


APPENDED_ATTR = "_kvscope_appended"  # {layer: (keys, values)} the last forward handed update()


def watch_updates(cache):
    """Makes `cache` keep, per layer, the K/V its last forward handed `cache.update()`: a
    step's own new records whatever the layer then stores (transformers' sliding layers keep
    only their last `window - 1` rows). Returns the cache; `begin_forward` clears the record."""
    inner = cache.update

    def update(key_states, value_states, layer_idx, *args, **kwargs):
        getattr(cache, APPENDED_ATTR)[int(layer_idx)] = (key_states.detach().clone(),
                                                          value_states.detach().clone())
        return inner(key_states, value_states, layer_idx, *args, **kwargs)

    cache.update = update
    setattr(cache, APPENDED_ATTR, {})
    return cache


def begin_forward(cache) -> None:
    if cache is not None and hasattr(cache, APPENDED_ATTR):
        setattr(cache, APPENDED_ATTR, {})


def layer_kinds(cache, layer_types: Optional[Sequence[str]] = None) -> Optional[List[Dict[str, Any]]]:
    """The trace's layer_kinds for a transformers cache with sliding or recurrent layers (None
    without one): a `DynamicSlidingWindowLayer` keeps the last `sliding_window - 1` rows in fed
    order, so it is a sliding layer whose cache holds `sliding_window - 1` slots (ring_slots);
    a sliding layer of another type is refused by name rather than recorded wrongly. transformers
    caches a chunked layer (Llama 4's "chunked_attention" in the config's `layer_types`) in
    the same layer class with `sliding_window` = attention_chunk_size: it is recorded as a
    chunked layer of that chunk, its ring of `chunk - 1` slots. A recurrent layer
    (recurrent_layers: Qwen3.5's Gated DeltaNet) is {"kind": "recurrent"}: no K/V records."""
    recurrent = set(recurrent_layers(cache, layer_types))
    layers = getattr(cache, "layers", None)
    if not isinstance(layers, (list, tuple)):
        if not recurrent:
            return None
        return [{"kind": "recurrent"} if i in recurrent else {"kind": "full"} for i in range(len(cache_layers(cache)))]
    if not recurrent and not any(getattr(l, "is_sliding", False) for l in layers):
        return None
    out = []
    for i, l in enumerate(layers):
        if i in recurrent:
            out.append({"kind": "recurrent"})
            continue
        if not getattr(l, "is_sliding", False):
            out.append({"kind": "full"})
            continue
        w = int(getattr(l, "sliding_window", 0) or 0)
        if type(l).__name__ != "DynamicSlidingWindowLayer" or w < 2:
            raise TypeError(f"cache layer {i} is a {type(l).__name__} (sliding window {w}): "
                            "kvscope-record knows the layout of DynamicSlidingWindowLayer only")
        chunked = layer_types is not None and i < len(layer_types) and layer_types[i] == "chunked_attention"
        out.append({"kind": "chunked", "chunk": w, "ring_slots": w - 1} if chunked
                   else {"kind": "sliding", "window": w, "ring_slots": w - 1})
    return out


def text_config(config):
    """A config's language model's: a multimodal config's text_config, else the config."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def latent_attention(config) -> bool:
    """Whether the (text) config has multi-head latent attention (kv_lora_rank: DeepSeek V2/V3),
    whose cache holds latent rows and roped key parts (layer_kinds "latent")."""
    return bool(getattr(text_config(config), "kv_lora_rank", None))


def latent_records(config, transformers_version: str) -> Optional[str]:
    """What this transformers caches of a latent-attention model (None: the config has none):
    "latent", the latent rows and roped key parts (transformers 5), or "heads", each head's
    decompressed key and value (4.x; the trace says model.latent_records "heads")."""
    if not latent_attention(config):
        return None
    return "latent" if int(transformers_version.split(".")[0]) >= 5 else "heads"


def config_layer_types(config) -> Optional[List[str]]:
    """The (text) config's layer_types, None where it has none."""
    types = getattr(text_config(config), "layer_types", None)
    return list(types) if isinstance(types, (list, tuple)) else None


def cache_length(cache) -> int:
    """Entries in the first layer of a cache that holds rows (0 for None or an empty cache)."""
    recurrent = set(recurrent_layers(cache))
    layers = [kv for i, kv in enumerate(cache_layers(cache)) if i not in recurrent]
    if not layers or layers[0][0] is None:
        return 0
    return int(layers[0][0].shape[-2])


def consumed_length(cache) -> int:
    """Tokens a cache has consumed: get_seq_length() of its first full-attention layer (a
    sliding layer stops counting where it wraps; a recurrent layer has no length: transformers
    refuses to count one but layer 0), else cache_length."""
    if cache is None:
        return 0
    if hasattr(cache, "get_seq_length") and not isinstance(cache, (list, tuple)):
        recurrent = set(recurrent_layers(cache))
        full = [i for i, l in enumerate(getattr(cache, "layers", None) or [])
                if not getattr(l, "is_sliding", False) and i not in recurrent]
        return int(cache.get_seq_length(full[0] if full else 0))
    return cache_length(cache)


def _state_zero(holder):
    """Entry 0 of a LinearAttentionLayer's conv_states / recurrent_states (a dict by state
    index; a list or a tensor tolerated), None where it holds none yet."""
    if holder is None:
        return None
    if isinstance(holder, dict):
        return holder.get(0)
    if isinstance(holder, (list, tuple)):
        return holder[0] if holder else None
    return holder


def _state_row(t, batch_index: int, rank: int, what: str) -> np.ndarray:
    """A float32 copy of row `batch_index` of a [B, ...] state tensor of `rank` axes after B
    (a copy: transformers updates its states in place)."""
    shape = tuple(getattr(t, "shape", ()))
    if len(shape) != rank + 1:
        raise ValueError(f"{what} has shape {list(shape)}, expected {rank + 1} axes [B, ...]")
    return np.array(to_numpy(t[batch_index]), dtype=np.float32, order="C", copy=True)


def layer_state(cache, layer: int, batch_index: int = 0) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """A recurrent layer's state after the latest forward, row `batch_index`, as float32 copies:
    (conv [C, K]: the causal conv's last K inputs, zeros before the first token; recurrent
    [Hv, Dk, Dv]), or None where the layer holds none yet. transformers 5:
    `cache.layers[l].conv_states[0]` [B, C, K] (the model's dtype) and `.recurrent_states[0]`
    [B, Hv, Dk, Dv] (float32); a layer that keeps its past for a rollback (record_past) holds
    more than K conv columns: its last K are taken. transformers 4's Qwen3-Next cache:
    `cache.conv_states[l]` / `cache.recurrent_states[l]`."""
    inner = getattr(cache, "self_attention_cache", None)
    if inner is not None:
        return layer_state(inner, layer, batch_index)
    layers = getattr(cache, "layers", None)
    width = None
    if isinstance(layers, (list, tuple)):
        lay = layers[layer]
        conv = _state_zero(getattr(lay, "conv_states", None))
        state = _state_zero(getattr(lay, "recurrent_states", None))
        sizes = getattr(lay, "conv_kernel_size", None)
        width = sizes.get(0) if isinstance(sizes, dict) else sizes
    else:
        convs, states = getattr(cache, "conv_states", None), getattr(cache, "recurrent_states", None)
        if convs is None or states is None:
            return None
        conv, state = convs[layer], states[layer]
    if conv is None or state is None or _empty(conv) or _empty(state):
        return None
    c = _state_row(conv, batch_index, 2, f"layer {layer}'s conv state")
    r = _state_row(state, batch_index, 3, f"layer {layer}'s recurrent state")
    if isinstance(width, int) and width > 0 and c.shape[1] != width:
        if c.shape[1] > width:
            c = np.ascontiguousarray(c[:, -width:])
        else:
            c = np.concatenate([np.zeros((c.shape[0], width - c.shape[1]), np.float32), c], axis=1)
    return c, r


def to_numpy(t) -> np.ndarray:
    """float32 numpy copy of a torch tensor or array-like."""
    if hasattr(t, "detach"):
        t = t.detach()
        if hasattr(t, "float"):
            t = t.float()
        return np.asarray(t.cpu().numpy(), dtype=np.float32)
    return np.asarray(t, dtype=np.float32)


def cache_row(t, batch_index: int = 0) -> np.ndarray:
    """[h, t, d] float32 copy of one batch row of a [B, h, t, d] cache tensor (a copy: some
    caches are updated in place)."""
    a = to_numpy(t)
    if a.ndim == 4:
        a = a[batch_index]
    if a.ndim != 3:
        raise ValueError(f"cache tensor has shape {list(a.shape)}, expected [B, h_kv, t, d]")
    return np.array(a, dtype=np.float32, order="C", copy=True)


# ----------------------------------------------------------------------------- sampling

class MT19937_64:
    """std::mt19937_64, bit for bit (the generator of KV Scope's RequestRng)."""
    N, M = 312, 156

    def __init__(self, seed: int = 5489):
        mt = [seed & MASK64]
        for i in range(1, self.N):
            prev = mt[-1]
            mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64)
        self.mt, self.index = mt, self.N

    def _twist(self):
        mt, N, M = self.mt, self.N, self.M
        for i in range(N):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % N] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + M) % N] ^ xa
        self.index = 0

    def next(self) -> int:
        if self.index >= self.N:
            self._twist()
        x = self.mt[self.index]
        self.index += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        x ^= x >> 43
        return x & MASK64


class RequestRng:
    """KV Scope's per-request generator: one 64-bit output per draw, top 53 bits / 2^53."""

    def __init__(self, seed: int = 0):
        self.engine, self.draws = MT19937_64(seed), 0

    def next_uniform(self) -> float:
        self.draws += 1
        return float(self.engine.next() >> 11) * 2.0 ** -53


def _softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x)
    e = np.where(x == -np.inf, 0.0, np.exp(np.where(x == -np.inf, 0.0, x - m)))
    return e / np.cumsum(e)[-1]  # sequential sum, as Sampler.cpp


def warped_probabilities(logits, policy: Dict[str, Any]) -> np.ndarray:
    """Temperature, top-k, top-p, softmax in double precision (Sampler::warpedProbabilities)."""
    row = np.asarray(logits, dtype=np.float32)
    if np.isnan(row).any() or np.isposinf(row).any():
        raise ValueError("the logits row holds NaN or +inf; cannot apply a sampling policy")
    x = row.astype(np.float64) / float(policy["temperature"])
    if not np.isfinite(x).any():
        raise ValueError("every logit is -inf; no token can be chosen")
    if policy.get("top_k") is not None:
        k = min(int(policy["top_k"]), x.size)
        kth = np.partition(x, x.size - k)[x.size - k]
        x = np.where(x < kth, -np.inf, x)
    top_p = policy.get("top_p")
    if top_p is not None and top_p < 1.0:
        order = np.argsort(x, kind="stable")
        cumulative = np.cumsum(_softmax(x)[order][:-1])
        x = x.copy()
        x[order[:-1][cumulative <= 1.0 - top_p]] = -np.inf
    return _softmax(x)


def choose(logits, policy: Dict[str, Any], rng: RequestRng) -> int:
    """Sampler::choose: greedy (no draw; ties by policy tie_rule) or one draw + inverse CDF
    over the eligible ids in ascending order."""
    row = np.asarray(logits, dtype=np.float32)
    if np.isnan(row).any():
        raise ValueError("the logits row holds NaN")
    if policy["temperature"] == 0:
        tied = np.flatnonzero(row == row.max())
        return int(tied[-1] if policy.get("tie_rule") == "highest" else tied[0])
    p = warped_probabilities(row, policy)
    u = rng.next_uniform()
    eligible = np.flatnonzero(p > 0.0)
    cumulative = np.cumsum(p[eligible])
    i = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
    return int(eligible[min(i, eligible.size - 1)])


# ----------------------------------------------------------------------------- recorder

class TraceRecorder:
    """Turns (fed tokens, positions, logits, choice, cache after the step) into trace steps.

    Cached mode: the appended records of a layer are the cache columns past the length it
    had after the request's previous step; a cache that got shorter is recorded as a
    `cache_reset` and all its columns as appended. Uncached mode: `cache` is the fresh
    full-prefix cache of this step; the records are the step's own tokens (the last
    len(fed_ids) columns), as KV Scope's uncached engine records them."""

    def __init__(self, model: Dict[str, Any], engine: str = ENGINE, mode: str = "cached",
                 snapshots: bool = False, checksums: bool = True, dtype: str = "F32",
                 expert_tap=None, layer_types: Optional[Sequence[str]] = None, state_every: int = 1,
                 latent: bool = False):
        self.writer = kvtrace.TraceWriter(model, engine=engine, mode=mode, dtype=dtype)
        if latent:  # every layer caches latent rows and roped key parts (DeepSeek's MLA)
            self.writer.extra["layer_kinds"] = [{"kind": "latent"} for _ in range(model["num_layers"])]
        # recurrent layers' states: at step 0 (the prefill) and every state_every-th step after
        # it (0: never); none in uncached mode (a fresh cache per step, nothing carried over)
        if not isinstance(state_every, int) or isinstance(state_every, bool) or state_every < 0:
            raise ValueError(f"state_every {state_every!r}: a non-negative integer (0: no states)")
        self.state_every = state_every
        # the model config's layer_types: which of the cache's sliding layers are chunked
        self.layer_types = list(layer_types) if layer_types else None
        # a mixture of experts: hf_routing.ExpertTap on the model's routers (None: dense)
        self.expert_tap = expert_tap
        self.mode, self.snapshots = mode, snapshots
        self.checksums = checksums and kvtrace.HAVE_XXHASH and mode == "cached"
        self.tick = 0
        self._lengths: Dict[int, List[int]] = {}

    @property
    def model(self) -> Dict[str, Any]:
        return self.writer.model

    def begin_request(self, rid: int, prompt_ids: Sequence[int], prompt_text: str = "",
                      policy: Optional[Dict[str, Any]] = None, max_new_tokens: int = 0,
                      eos_ids: Sequence[int] = (), arrival_tick: Optional[int] = None,
                      batch_group: int = -1) -> None:
        self.writer.add_request(rid, prompt_ids=prompt_ids, prompt_text=prompt_text, policy=policy,
                                max_new_tokens=max_new_tokens, eos_ids=eos_ids, stop_reason="running",
                                arrival_tick=self.tick if arrival_tick is None else arrival_tick,
                                batch_group=batch_group)
        self._lengths[rid] = [0] * self.model["num_layers"]

    def record_step(self, request: int, step: int, fed_ids: Sequence[int], positions: Sequence[int],
                    logits, chosen: int, cache=None, rng_draws_before: int = 0,
                    rng_draws_after: int = 0, events: Sequence[str] = (), batch_index: int = 0,
                    slot: Optional[int] = None, weights_version: int = 0,
                    fed_mask: Optional[Sequence[int]] = None,
                    tick: Optional[int] = None, batch_rows: int = 1) -> kvtrace.Step:
        """`tick`: the engine clock of the step (default: the next one); the rows of one
        batched forward share theirs. `fed_mask`: 0 for left padding (see the format).
        With an expert tap, the step's experts are row `batch_index` (of `batch_rows`) of the
        latest forward's, its last len(fed_ids) entries. Recurrent layers: their states in
        `cache` (read after the step's forward), row `batch_index`, where `step` is 0 or a
        multiple of state_every (cached mode)."""
        m = self.model
        L, H, D = m["num_layers"], m["num_kv_heads"], m["head_dim"]
        Dv = kvtrace.value_dim(m)
        events = list(events)
        layers = cache_layers(cache) if cache is not None else []
        kw: Dict[str, Any] = {}
        if layers:
            if len(layers) != L:
                raise ValueError(f"the cache has {len(layers)} layers, the model block says {L}")
            # Recurrent layers (Gated DeltaNet) hold a state, no rows: nothing is recorded for
            # them (0 records, cache length 0), and layer_kinds says what they are.
            recurrent = set(recurrent_layers(cache, self.layer_types))
            rows = []
            for k, v in layers:
                if k is None:
                    rows.append((np.zeros((H, 0, D), np.float32), np.zeros((H, 0, Dv), np.float32)))
                else:
                    rows.append((cache_row(k, batch_index), cache_row(v, batch_index)))
            # An engine's cache that drops rows (mlx-lm's ChunkedKVCache) says how many entries
            # each layer was fed.
            lengths = list(getattr(cache, "logical_lengths", None) or [k.shape[1] for k, _ in rows])
            prev = self._lengths.setdefault(request, [0] * L)
            appended = getattr(cache, APPENDED_ATTR, None)
            if "layer_kinds" not in self.writer.extra:
                # sliding layers (rings) where update() is watched in cached mode; recurrent
                # layers always
                if appended is not None and self.mode == "cached":
                    kinds = layer_kinds(cache, self.layer_types)
                elif recurrent:
                    kinds = [{"kind": "recurrent" if l in recurrent else "full"} for l in range(L)]
                else:
                    kinds = None
                if kinds is not None:
                    self.writer.extra["layer_kinds"] = kinds
            empty = (np.zeros((H, 0, D), np.float32), np.zeros((H, 0, Dv), np.float32))
            if appended is not None and self.mode == "cached":
                # What each layer's update() was handed: the step's own records, in fed order.
                rowed = [l for l in range(L) if l not in recurrent]
                if sorted(appended) != rowed:
                    raise ValueError(f"the forward updated cache layers {sorted(appended)}, expected "
                                     f"{rowed} (the layers that hold rows)")
                keys = [cache_row(appended[l][0], batch_index) if l in appended else empty[0] for l in range(L)]
                values = [cache_row(appended[l][1], batch_index) if l in appended else empty[1] for l in range(L)]
            elif self.mode == "uncached":
                # The step's own tokens are the last len(fed_ids) of the full prefix; taken from
                # what update() was handed where it was watched, since a sliding layer keeps
                # only its window's rows of the prefix.
                n = len(fed_ids)
                src = rows if appended is None else [
                    (cache_row(appended[l][0], batch_index), cache_row(appended[l][1], batch_index))
                    if l in appended else empty for l in range(L)]
                keys = [k[:, k.shape[1] - min(n, k.shape[1]):].copy() for k, _ in src]
                values = [v[:, v.shape[1] - min(n, v.shape[1]):].copy() for _, v in src]
            else:
                if any(t < p for t, p in zip(lengths, prev)) and "cache_reset" not in events:
                    events.append("cache_reset")
                if "cache_reset" in events:
                    prev = [0] * L
                keys = [k[:, p:].copy() for (k, _), p in zip(rows, prev)]
                values = [v[:, p:].copy() for (_, v), p in zip(rows, prev)]
            kw.update(keys=keys, values=values, cache_lengths=lengths)
            if self.snapshots:
                kw.update(cache_keys=[k for k, _ in rows], cache_values=[v for _, v in rows])
            if self.checksums:
                kw.update(checksums_k=[kvtrace.cache_checksum(k) for k, _ in rows],
                          checksums_v=[kvtrace.cache_checksum(v) for _, v in rows])
            if recurrent and self.mode == "cached" and self.state_every and step % self.state_every == 0:
                states = {l: layer_state(cache, l, batch_index) for l in sorted(recurrent)}
                if all(x is not None for x in states.values()):  # all recurrent layers or none
                    kw["states"] = states
            self._lengths[request] = lengths
        if self.expert_tap is not None:
            kw["experts"] = self.expert_tap.take(len(fed_ids), batch_index, batch_rows)
        st = self.writer.add_step(request=request, step=step, fed_ids=fed_ids, positions=positions,
                                  chosen=chosen, logits=None if logits is None else to_numpy(logits),
                                  rng_draws_before=rng_draws_before, rng_draws_after=rng_draws_after,
                                  weights_version=weights_version, events=events,
                                  tick=self.tick if tick is None else tick, fed_mask=fed_mask,
                                  slot=request if slot is None else slot, **kw)
        self.tick = max(self.tick, (self.tick if tick is None else tick) + 1)
        return st

    def finish_request(self, rid: int, generated: Sequence[int], stop_reason: str) -> None:
        self.writer.update_request(rid, generated=list(generated), stop_reason=stop_reason)

    def save(self, path: str, overwrite: bool = True) -> None:
        self.writer.save(path, overwrite=overwrite)


# ----------------------------------------------------------------------------- decode loop

Forward = Callable[[List[int], List[int], Any], Tuple[Any, Any]]


def decode(forward: Forward, recorder: TraceRecorder, request: int, prompt_ids: Sequence[int],
           max_new_tokens: int, policy: Optional[Dict[str, Any]] = None, eos_ids: Sequence[int] = (),
           stop_at_eos: bool = True, max_positions: int = 0, uncached: bool = False,
           prompt_text: str = "", prefill_chunk: int = 0) -> List[int]:
    """Runs one request. `forward(ids, positions, cache)` returns (logits row of the last fed
    token, cache after the step); cache None starts a new one. Returns the generated ids.
    `prefill_chunk` > 0 feeds the prompt that many tokens at a time (chunked prefill: a step
    per chunk, the chunks before the last choosing nothing)."""
    # This loop draws with KV Scope's generator, so the audit can replay it from the seed.
    policy = dict(kvtrace.normalize_policy(policy), generator="kvscope")
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise ValueError(f"request {request} has an empty prompt")
    if max_positions and len(prompt) > max_positions:
        raise ValueError(f"the prompt has {len(prompt)} tokens; the model has {max_positions} positions")
    recorder.begin_request(request, prompt, prompt_text=prompt_text, policy=policy,
                           max_new_tokens=max_new_tokens, eos_ids=eos_ids)
    rng = RequestRng(policy["seed"])
    generated: List[int] = []
    cache, stop = None, "max_new_tokens"
    first = 0  # the step of the last (or only) prefill chunk
    if prefill_chunk > 0 and len(prompt) > prefill_chunk:
        if uncached:
            raise ValueError("a chunked prefill is the cached engine's; the uncached reference feeds the whole prefix")
        # every chunk but the last: it fills the cache and chooses nothing
        for start in range(0, len(prompt) - prefill_chunk, prefill_chunk):
            chunk, at = prompt[start:start + prefill_chunk], list(range(start, start + prefill_chunk))
            _, cache = forward(chunk, at, cache)
            recorder.record_step(request, first, chunk, at, None, -1, cache=cache, rng_draws_before=rng.draws,
                                 rng_draws_after=rng.draws, events=["arrival"] if first == 0 else [])
            first += 1
    fed, positions = prompt[first * prefill_chunk:], list(range(first * prefill_chunk, len(prompt)))
    for i in range(max_new_tokens):
        step = first + i
        if uncached:
            full = prompt + generated
            logits, step_cache = forward(full, list(range(len(full))), None)
            if step > 0:
                fed, positions = [full[-1]], [len(full) - 1]
        else:
            logits, cache = forward(fed, positions, cache)
            step_cache = cache
        row = to_numpy(logits).reshape(-1)
        before = rng.draws
        token = choose(row, policy, rng)
        events = ["arrival"] if step == 0 else []  # a chunked prefill's first chunk had it
        generated.append(token)
        next_position = positions[-1] + 1
        done = True
        if stop_at_eos and token in eos_ids:
            stop = "eos"
            events.append("eos")
        elif len(generated) >= max_new_tokens:
            stop = "max_new_tokens"
        elif max_positions and next_position >= max_positions:
            stop = "context_limit"
            events.append("context_limit")
        else:
            done = False
        recorder.record_step(request, step, fed, positions, row, token, cache=step_cache,
                             rng_draws_before=before, rng_draws_after=rng.draws, events=events)
        if done:
            break
        fed, positions = [token], [next_position]
    recorder.finish_request(request, generated, stop)
    return generated


# ----------------------------------------------------------------------------- transformers

def model_info(config, model_dir: str, vocab_size: int, compute_dtype: str,
               fingerprint: bool = True, latent_layout: Optional[str] = "latent") -> Dict[str, Any]:
    """The trace's model block from a transformers config; a latent-attention model's records as
    `latent_layout` (latent_records()) says the engine caches them."""
    c = text_config(config)

    def first(*names, default=0):
        for n in names:
            v = getattr(c, n, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return default
    heads = first("num_attention_heads", "n_head")
    hidden = first("hidden_size", "n_embd", "d_model")
    if latent_attention(config) and latent_layout == "heads":  # transformers 4: [B, heads, t, nope + rope]
        shape = {"num_kv_heads": heads, "head_dim": first("qk_nope_head_dim") + first("qk_rope_head_dim"),
                 "value_head_dim": first("v_head_dim"), "latent_records": "heads"}  # and [B, heads, t, v]
    elif latent_attention(config):  # transformers 5 caches the latent row as keys [B, 1, t, kv_lora_rank]
        shape = {"num_kv_heads": 1, "head_dim": first("kv_lora_rank"),  # and k_pe as values
                 "value_head_dim": first("qk_rope_head_dim")}
    else:
        shape = {"num_kv_heads": first("num_key_value_heads", "num_kv_heads", default=heads),
                 "head_dim": first("head_dim", default=hidden // heads if heads else 0)}
    return {"fingerprint": kvtrace.model_fingerprint(model_dir) if fingerprint else "",
            "architecture": getattr(c, "model_type", "") or "",
            "directory": os.path.abspath(model_dir),
            "num_layers": first("num_hidden_layers", "n_layer"),
            "num_heads": heads, **shape,
            "vocab_size": vocab_size,
            "max_positions": first("max_position_embeddings", "n_positions", "n_ctx"),
            "stored_dtype": kvtrace.model_stored_dtype(model_dir), "compute_dtype": compute_dtype}


def _policy_from_args(args) -> Dict[str, Any]:
    return kvtrace.normalize_policy({"temperature": args.temperature, "top_k": args.top_k,
                                     "top_p": args.top_p, "seed": args.seed,
                                     "tie_rule": args.tie_rule})


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="kvscope-record", description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="version", version=f"kvscope-record (kvscope-trace {__version__})")
    ap.add_argument("--engine", choices=("transformers", "llama.cpp", "mlx"), default="transformers",
                    help="who runs the model: transformers (default), llama.cpp through "
                         "llama-cpp-python (llama_cpp_trace.py) or mlx-lm (mlx_trace.py)")
    ap.add_argument("--model", required=True,
                    help="local model directory, or a GGUF file (loaded by transformers' GGUF "
                         "loader, or run by llama.cpp with --engine llama.cpp)")
    ap.add_argument("--prompt", action="append", default=[], help="prompt text (repeatable)")
    ap.add_argument("--prompt-ids", action="append", default=[],
                    help="comma-separated prompt token ids instead of text (repeatable)")
    ap.add_argument("--max-new", type=int, required=True, help="tokens to generate per request")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tie-rule", choices=("lowest", "highest"), default="lowest")
    ap.add_argument("--snapshots", action="store_true", help="also store the whole cache after every step")
    ap.add_argument("--uncached", action="store_true", help="recompute the full prefix every step")
    ap.add_argument("--state-every", type=int, default=1, metavar="N",
                    help="recurrent layers (Qwen3.5's Gated DeltaNet): record their state after the "
                         "prefill and every N-th decode step (default 1: every step; 0: never; "
                         "--uncached records none)")
    ap.add_argument("--ignore-eos", action="store_true", help="do not stop at an EOS token")
    ap.add_argument("--dtype", default="float32", help="torch compute dtype (float32, bfloat16, float16)")
    ap.add_argument("--store", choices=kvtrace.STORE_DTYPES, default="F32", help="trace tensor dtype")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--attn-implementation", default=None,
                    help="transformers' attention implementation (eager, sdpa, ...); default: "
                         "the one transformers picks (sdpa where it can; it ignores Gemma 2's "
                         "attention soft-cap)")
    ap.add_argument("--no-fingerprint", action="store_true", help="skip hashing the weight files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--save-state", default=None,
                    help="llama.cpp, mlx: also save the last request's cache as the engine saves it "
                         "(llama_state_seq_save_file; mlx-lm's save_prompt_cache, .safetensors)")
    from . import llama_cpp_trace
    llama_cpp_trace.add_arguments(ap)
    args = ap.parse_args(argv)
    if not args.prompt and not args.prompt_ids:
        ap.error("give at least one --prompt or --prompt-ids")
    if args.max_new < 1:
        ap.error("--max-new must be at least 1")
    if args.state_every < 0:
        ap.error("--state-every must be 0 (no states) or more")
    try:
        policy = _policy_from_args(args)
    except kvtrace.TraceError as e:
        ap.error(e.detail)
    if args.engine == "llama.cpp":
        return llama_cpp_trace.record(args, policy)
    if args.engine == "mlx":
        from . import mlx_trace
        return mlx_trace.record(args, policy)

    import inspect

    import torch  # lazily: the module imports without torch/transformers
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56
    load_kw = {dtype_kw: dtype}
    if args.attn_implementation:
        load_kw["attn_implementation"] = args.attn_implementation
    if args.model.endswith(".gguf"):  # transformers' own GGUF loader (dequantises; needs gguf)
        load_kw["gguf_file"] = os.path.basename(args.model)
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(args.model)), **load_kw)
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, **load_kw)
    model.to(args.device).eval()
    prompts: List[Tuple[List[int], str]] = []
    if args.prompt:
        tok = AutoTokenizer.from_pretrained(args.model)
        prompts += [(list(tok(p)["input_ids"]), p) for p in args.prompt]
    prompts += [([int(x) for x in s.split(",") if x.strip()], "") for s in args.prompt_ids]

    params = inspect.signature(model.forward).parameters
    takes_cache_position = "cache_position" in params

    # A cache made here (config: per-layer types in transformers 5) so that its update() calls
    # can be watched; transformers 4's DynamicCache takes no config.
    # Without a DynamicCache class (a library that only imitates transformers' API) the model
    # makes its own cache and the records are read from it after each step.
    dynamic_cache = getattr(transformers, "DynamicCache", None)
    cache_kwargs = {"config": model.config} if dynamic_cache is not None and "config" in \
        inspect.signature(dynamic_cache.__init__).parameters else {}

    def forward(ids: List[int], positions: List[int], cache):
        dev = args.device
        if cache is None and dynamic_cache is not None:  # uncached: a fresh one every step
            cache = watch_updates(dynamic_cache(**cache_kwargs))
        begin_forward(cache)
        past = consumed_length(cache)  # get_seq_length() counts on where a sliding layer stops
        kwargs = {"input_ids": torch.tensor([ids], device=dev),
                  "position_ids": torch.tensor([positions], device=dev),
                  "attention_mask": torch.ones((1, past + len(ids)), dtype=torch.long, device=dev),
                  "past_key_values": cache, "use_cache": True}
        if takes_cache_position:
            kwargs["cache_position"] = torch.arange(past, past + len(ids), device=dev)
        with torch.no_grad():
            out = model(**kwargs)
        return to_numpy(out.logits[0, -1]), out.past_key_values

    gen_cfg = getattr(model, "generation_config", None)
    eos = getattr(gen_cfg, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    vocab = int(model.get_output_embeddings().weight.shape[0]) if model.get_output_embeddings() is not None \
        else int(model.config.vocab_size)
    info = model_info(model.config, args.model, vocab, str(dtype).replace("torch.", ""),
                      fingerprint=not args.no_fingerprint,
                      latent_layout=latent_records(model.config, transformers.__version__))
    attn = getattr(model.config, "_attn_implementation", None) or "default"
    engine = (f"{ENGINE} (transformers {transformers.__version__}, torch {torch.__version__}, "
              f"attention {attn})")
    from .hf_routing import ExpertTap
    tap = ExpertTap(model, info["num_layers"])
    rec = TraceRecorder(info, engine=engine, mode="uncached" if args.uncached else "cached",
                        snapshots=args.snapshots, dtype=args.store,
                        expert_tap=tap if tap.active else None,
                        layer_types=config_layer_types(model.config), state_every=args.state_every,
                        latent=latent_attention(model.config))
    for rid, (ids, text) in enumerate(prompts):
        out = decode(forward, rec, rid, ids, args.max_new, policy, eos_ids=eos_ids,
                     stop_at_eos=not args.ignore_eos, max_positions=info["max_positions"],
                     uncached=args.uncached, prompt_text=text)
        print(f"request {rid}: {len(ids)} prompt tokens -> {out}")
    rec.save(args.out)
    print(f"wrote {args.out}")
    return 0

