"""An independent PyTorch decode engine: the decode loop over torch_model.Model, the bugs
patched in the way engines really have them, and the token chooser.

It shares no code with KV Scope's C++ core. `DecodeEngine.run_cached` is the engine under
test (step 0 feeds the prompt, then one generated token per step with the cache, positions
from `cache.get_seq_length()`); `run_uncached` is its reference (the whole prefix
recomputed in a fresh cache every step). Both return a `RunLog` that record_run.py writes
as a KV Scope trace.

Bugs (`parse_bug`, syntax `NAME[:k=v,...]`, several joined with `+`):
  wrong_layer:layer=L,source=J,step=S   a cache subclass: from step S, update() of layer L
                                        replaces L's whole cache with a copy of J's
  cross_request:step=S[,prompt=a/b/c]   request 1 prefilled into request 0's cache object
                                        between request 0's steps S-1 and S
  duplicate_append:step=S               a cache subclass: update() appends every record twice
  wrong_position:offset=O,step=S        decode positions past_len + O
  positions_from_zero:step=S            decode positions restart at 0
  stale_cache:step=S                    weights swapped to the second checkpoint before step S,
                                        the old cache kept (weights_version 1 from S)
  tie_rule                              greedy ties broken toward the highest id
  rng_extra_draw:step=S                 one extra torch.rand draw before each sample from S
  speculative:draft=K                   not a bug: greedy speculative decoding with
                                        prompt-lookup drafts (transformers' algorithm: the
                                        earliest match of the last 2, else 1, tokens), K drafts
                                        verified per step, the rejected ones cropped
  speculative_rollback:draft=K,step=S   the same, but from step S the cache's crop() is a
                                        no-op (a cache type whose trim does nothing): the
                                        rejected drafts' rows stay
  kv_cache:format=F[,static=1]          not a bug: a quantised cache (int8, fp8_e4m3,
                                        fp8_e5m2; quantized_cache.py), the trace declares it;
                                        static=1: one scale per layer (calibrated on the prefill)
  kv_quantization:format=F,scale=P,layer=L,step=S
                                        that cache, but from step S layer L's rows are
                                        dequantised with P percent of their scale
  rope_scaling:step=S,layer=L           from step S (0 = the prefill) the path rotates queries and keys
                                        of layer L (-1 = all) without the config's
                                        rope_scaling (the linear / llama3 factor dropped, as
                                        a decode kernel that ignores it); needs a scaled RoPE
                                        checkpoint
  prefill_chunk:size=N                  not a bug: chunked prefill, the prompt fed N tokens
                                        per forward over the cache (vLLM's / SGLang's chunked
                                        prefill); every chunk but the last chooses nothing
  chunk_position:size=N,chunk=C,layer=L that prefill, but from chunk C on each chunk's
                                        positions are computed per chunk (0..n-1, not
                                        past_len + i): layer -1 feeds (and records) those
                                        ids; layer L >= 0 (RoPE only) records the right ids
                                        and rotates layer L's queries and keys at the
                                        chunk-local ones
  ring_window                           not a bug: sliding-window layers keep a ring of S = W
                                        slots (ring_cache.py), the trace records the slot maps
  window_wrap:layer=L                   that ring, but once layer L's cache wraps (-1: every
                                        sliding layer) entry c goes to slot (c - 1) % S
  mla_absorbed                          not a bug: latent attention (DeepSeek, torch_mla.py)
                                        decoded in the absorbed form from step 1
  mla_absorb:layer=L,step=S             absorbed decode from step S reading kv_b_proj by halves
                                        (every head's key rows, then value rows) at layer L
  mla_heads                             not a bug: latent attention cached as each head's
                                        decompressed K and V (transformers 4.x's cache)
Prefix caching (several requests, one reusing another's rows): prefix_cache.py, with its
prefix_cache:block=B and the bug prefix_reuse:block=B,layer=L.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_model import DTYPES, KVCache, Model, ModelConfig, Precision  # noqa: E402,F401
from quantized_cache import QuantizedCache  # noqa: E402
from ring_cache import RingWindowCache, layer_kinds  # noqa: E402
from torch_mla import check_latent_bugs, latent_kinds, set_latent_form  # noqa: E402


# ----------------------------------------------------------------------------- bugs

# name -> {parameter: default}; `step` is the first step the bug acts on.
BUG_PARAMS: Dict[str, Dict[str, object]] = {
    "wrong_layer": {"layer": 1, "source": 0, "step": 1},
    "cross_request": {"step": 4, "prompt": None},
    "duplicate_append": {"step": 1},
    "wrong_position": {"offset": -1, "step": 1},
    "positions_from_zero": {"step": 1},
    "stale_cache": {"step": 5},
    "tie_rule": {},
    "rng_extra_draw": {"step": 0},
    "speculative": {"draft": 3},
    "speculative_rollback": {"draft": 3, "step": 1},
    "kv_cache": {"format": "int8", "static": 0},
    "kv_quantization": {"format": "int8", "scale": 200, "layer": 0, "step": 1, "static": 0},
    "rope_scaling": {"step": 1, "layer": -1},
    "prefill_chunk": {"size": 4},
    "chunk_position": {"size": 4, "chunk": 1, "layer": -1},
    "ring_window": {},
    "window_wrap": {"layer": -1},
    "mla_absorbed": {},  # torch_mla.py: latent attention decoded in the absorbed form
    "mla_absorb": {"layer": -1, "step": 1},  # ... reading kv_b_proj by halves
    "mla_heads": {},  # ... cached as decompressed heads
}
CACHE_BUGS = ("wrong_layer", "duplicate_append", "speculative_rollback", "kv_cache", "kv_quantization",
              "ring_window", "window_wrap")
STRING_PARAMS = ("format",)
POLICY_BUGS = ("tie_rule", "rng_extra_draw")


def parse_bug(spec) -> List[Dict[str, object]]:
    """Parses `NAME[:k=v,...][+NAME...]` (or a dict, or a list of dicts) into a list of
    {"name": NAME, params...} with the defaults of BUG_PARAMS filled in. Integer values;
    `prompt` of cross_request is token ids joined by '/'."""
    if spec is None or spec == "" or spec == []:
        return []
    if isinstance(spec, dict):
        items = [dict(spec)]
    elif isinstance(spec, list):
        items = [dict(s) for s in spec]
    else:
        items = []
        for part in str(spec).split("+"):
            name, _, rest = part.strip().partition(":")
            item: Dict[str, object] = {"name": name}
            for kv in filter(None, rest.split(",")):
                k, eq, v = kv.partition("=")
                if not eq:
                    raise ValueError(f"bug {name}: parameter {kv!r} is not k=v")
                item[k.strip()] = v.strip()
            items.append(item)
    out = []
    for item in items:
        name = item.pop("name", None)
        if name not in BUG_PARAMS:
            raise ValueError(f"unknown bug {name!r} (known: {', '.join(BUG_PARAMS)})")
        params = dict(BUG_PARAMS[name])
        for k, v in item.items():
            if k not in params:
                raise ValueError(f"bug {name}: unknown parameter {k!r} (known: {', '.join(params) or 'none'})")
            try:
                if k == "prompt":
                    params[k] = [int(t) for t in (v.split("/") if isinstance(v, str) else v)]
                elif k in STRING_PARAMS:
                    params[k] = str(v)
                else:
                    params[k] = int(v)
            except (TypeError, ValueError):
                raise ValueError(f"bug {name}: parameter {k}={v!r} is not an integer") from None
        out.append({"name": name, **params})
    names = [b["name"] for b in out]
    if len(set(names)) != len(names) or sum(n in CACHE_BUGS for n in names) > 1:
        raise ValueError(f"bugs {names}: each bug once, and at most one of {CACHE_BUGS}")
    return out


class WrongLayerCache(KVCache):
    """From step `from_step` on, update() for `layer` replaces that layer's WHOLE cache
    (prefix rows too) with a copy of layer `source`'s and returns it; the length stays
    right. Steps are counted by update() calls per layer (step 0 = the prefill)."""

    def __init__(self, num_layers: int, layer: int, source: int, from_step: int):
        super().__init__(num_layers)
        if not 0 <= source < layer < num_layers:
            raise ValueError(f"wrong_layer needs 0 <= source < layer < {num_layers} "
                             f"(source {source}, layer {layer}): the source must be updated first")
        self.layer, self.source, self.from_step = layer, source, from_step
        self.calls = [0] * num_layers

    def update(self, layer_idx, k_new, v_new):
        step = self.calls[layer_idx]
        self.calls[layer_idx] += 1
        k_all, v_all = super().update(layer_idx, k_new, v_new)
        if layer_idx == self.layer and step >= self.from_step:
            self.keys[layer_idx] = self.keys[self.source].clone()
            self.values[layer_idx] = self.values[self.source].clone()
            return self.keys[layer_idx], self.values[layer_idx]
        return k_all, v_all


class DuplicateAppendCache(KVCache):
    """From step `from_step` on, update() appends each new record twice and returns the
    cache with both copies (get_seq_length() then reports the inflated length)."""

    def __init__(self, num_layers: int, from_step: int):
        super().__init__(num_layers)
        self.from_step = from_step
        self.calls = [0] * num_layers

    def update(self, layer_idx, k_new, v_new):
        step = self.calls[layer_idx]
        self.calls[layer_idx] += 1
        if step >= self.from_step:
            k_new, v_new = torch.cat([k_new, k_new], dim=2), torch.cat([v_new, v_new], dim=2)
        return super().update(layer_idx, k_new, v_new)


class NoCropCache(KVCache):
    """From the `from_step`-th crop() call on (counting verification steps from 1), crop()
    does nothing: the rejected drafts' rows stay while the engine counts only accepted
    tokens."""

    def __init__(self, num_layers: int, from_step: int):
        super().__init__(num_layers)
        self.from_step = from_step
        self.step = 0          # set by the engine before each crop
        self.skipped: List[int] = []

    def crop(self, max_length: int) -> None:
        if self.step >= self.from_step:
            if self.get_seq_length() > max_length:
                self.skipped.append(self.step)
            return
        super().crop(max_length)


def prompt_lookup(stream: List[int], count: int, max_ngram: int = 2) -> List[int]:
    """Draft tokens as transformers' prompt lookup decoding proposes them: for the last
    `max_ngram`, then fewer, tokens of the stream, the EARLIEST earlier match whose
    continuation is not empty; up to `count` tokens of that continuation ([] without a
    match)."""
    n = len(stream)
    for size in range(max_ngram, 0, -1):
        if n <= size:
            continue
        tail = stream[n - size:]
        for start in range(0, n - size):
            if stream[start:start + size] == tail:
                out = stream[start + size:min(start + size + count, n)]
                if out:
                    return out
    return []


# ----------------------------------------------------------------------------- choosing

class TokenChooser:
    """Greedy (torch.argmax: ties to the lowest id) or temperature sampling with
    torch.multinomial and a per-request torch.Generator. `draws` counts generator calls."""

    def __init__(self, temperature: float = 0.0, seed: int = 0, tie_highest: bool = False,
                 extra_draw_from: Optional[int] = None):
        if temperature < 0:
            raise ValueError(f"temperature {temperature} must be >= 0")
        self.temperature, self.seed = float(temperature), int(seed)
        self.tie_highest, self.extra_draw_from = tie_highest, extra_draw_from
        self.generator = torch.Generator().manual_seed(self.seed) if temperature > 0 else None
        self.draws = 0

    def policy(self) -> Dict[str, object]:
        """The policy the trace declares (the intended one, whatever the bug)."""
        if self.temperature == 0:
            return {"temperature": 0.0}
        return {"temperature": self.temperature, "seed": self.seed, "generator": "torch"}

    def choose(self, row: torch.Tensor, step: int) -> Tuple[int, int, int]:
        """(token, draws before the choosing draw, draws after) for a float32 row [V]."""
        if self.generator is None:
            if self.tie_highest:  # the bug: the last of the maxima
                return int(row.numel() - 1 - torch.argmax(row.flip(0))), self.draws, self.draws
            return int(torch.argmax(row)), self.draws, self.draws
        if self.extra_draw_from is not None and step >= self.extra_draw_from:
            torch.rand(1, generator=self.generator)  # the bug: one draw too many
            self.draws += 1
        before = self.draws
        probs = torch.softmax(row / self.temperature, dim=-1)
        token = int(torch.multinomial(probs, 1, generator=self.generator)[0])
        self.draws += 1
        return token, before, self.draws


# ----------------------------------------------------------------------------- decode loop

class StepLog:
    """What one step of the engine did (one row of the trace)."""

    def __init__(self, **kw):
        self.request: int = kw["request"]
        self.step: int = kw["step"]
        self.fed_ids: List[int] = list(kw["fed_ids"])
        self.positions: List[int] = list(kw["positions"])
        self.chosen: int = kw["chosen"]
        self.logits: np.ndarray = kw["logits"]
        self.cache_keys: List[np.ndarray] = kw["cache_keys"]
        self.cache_values: List[np.ndarray] = kw["cache_values"]
        self.weights_version: int = kw.get("weights_version", 0)
        self.slot: int = kw.get("slot", 0)
        self.events: List[str] = list(kw.get("events", ()))
        self.rng_before: int = kw.get("rng_before", 0)
        self.rng_after: int = kw.get("rng_after", 0)
        self.draft_count: int = kw.get("draft_count", 0)
        self.accepted_count: int = kw.get("accepted_count", 0)
        self.ring: Optional[Dict[str, object]] = kw.get("ring")  # a ring cache's records (RingWindowCache.record)
        # A prefill chunk before the last chooses nothing and keeps no logits row.
        self.tied: List[int] = [] if self.logits is None else [
            int(i) for i in np.flatnonzero(self.logits == float(self.logits.max()))]


class RunLog:
    """A whole run: requests (dicts for TraceWriter.add_request), steps in engine order,
    and `injected` (where each bug acted)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.requests: List[Dict[str, object]] = []
        self.steps: List[StepLog] = []
        self.injected: List[Dict[str, object]] = []
        self.weights_dirs: List[str] = []
        self.kv_cache: Optional[Dict[str, object]] = None  # a quantised cache's trace header
        self.layer_kinds: Optional[List[Dict[str, object]]] = None  # a model with sliding layers


class DecodeEngine:
    """The decode loop: step 0 feeds the prompt, then one generated token per step with
    the cache; positions = cache.get_seq_length() + i. `bugs` (parse_bug) patch it."""

    def __init__(self, model: Model, bugs=None, second_model: Optional[str] = None):
        self.model = model
        self.bugs = {b["name"]: b for b in parse_bug(bugs)}
        self.second_model = second_model
        if "stale_cache" in self.bugs and not second_model:
            raise ValueError("stale_cache needs a second checkpoint (second_model / --second-model)")
        for name in ("cross_request", "stale_cache"):
            if name in self.bugs and self.bugs[name]["step"] < 1:
                raise ValueError(f"{name}: step must be >= 1 (it acts between two steps)")
        b = self.bugs.get("rope_scaling")
        if b:
            if model.cfg.model_type == "gpt2" or model.cfg.rope["type"] == "default":
                raise ValueError("rope_scaling needs a RoPE checkpoint with rope_scaling (linear, llama3)")
            if b["step"] < 0 or not -1 <= b["layer"] < model.cfg.num_layers:
                raise ValueError(f"rope_scaling: step {b['step']} / layer {b['layer']} out of range")
        check_latent_bugs(self.bugs, model)
        if "prefill_chunk" in self.bugs and "chunk_position" in self.bugs:
            raise ValueError("chunk_position brings its own chunked prefill (size=N)")
        ring = "ring_window" in self.bugs or "window_wrap" in self.bugs
        if ring and (not any(model.cfg.windows) or self.drafts_per_step()):
            raise ValueError("ring_window / window_wrap need a model with sliding-window layers and "
                             "no speculative decoding (a ring cannot drop rejected drafts)")
        b = self.bugs.get("chunk_position")
        if b:
            if b["chunk"] < 1 or b["size"] < 1 or not -1 <= b["layer"] < model.cfg.num_layers:
                raise ValueError(f"chunk_position: chunk {b['chunk']} (>= 1), size {b['size']}, "
                                 f"layer {b['layer']} out of range")
            if b["layer"] >= 0 and model.cfg.model_type == "gpt2":
                raise ValueError("chunk_position: gpt2 adds learned position embeddings once, at "
                                 "the input; a per-layer position needs RoPE (use layer=-1)")

    def unscaled_rope_layers(self, step: int):
        """rope_scaling: the layers whose RoPE drops the scaling at this step (None: none)."""
        b = self.bugs.get("rope_scaling")
        if not b or step < b["step"]:
            return None
        return set(range(self.model.cfg.num_layers)) if b["layer"] < 0 else {b["layer"]}

    def chunk_size(self) -> int:
        """Chunked prefill: prompt tokens per forward (0 = the whole prompt at once)."""
        for name in ("prefill_chunk", "chunk_position"):
            if name in self.bugs:
                return int(self.bugs[name]["size"])
        return 0

    def chunk_positions(self, past: int, n: int, chunk: int):
        """(position ids, {layer: ids it rotates with instead}) of prefill chunk `chunk`
        (n tokens over `past` cached ones): past + i, or what chunk_position makes."""
        right = [past + i for i in range(n)]
        b = self.bugs.get("chunk_position")
        if not b or chunk < b["chunk"]:
            return right, None
        if b["layer"] < 0:
            return list(range(n)), None  # computed per chunk: restart at 0
        return right, {b["layer"]: list(range(n))}

    def new_cache(self) -> KVCache:
        """A fresh cache object, patched when a cache bug is selected."""
        L = self.model.cfg.num_layers
        if "wrong_layer" in self.bugs:
            b = self.bugs["wrong_layer"]
            return WrongLayerCache(L, b["layer"], b["source"], b["step"])
        if "duplicate_append" in self.bugs:
            return DuplicateAppendCache(L, self.bugs["duplicate_append"]["step"])
        if "speculative_rollback" in self.bugs:
            return NoCropCache(L, self.bugs["speculative_rollback"]["step"])
        if "kv_cache" in self.bugs:
            b = self.bugs["kv_cache"]
            return QuantizedCache(L, b["format"], static=bool(b["static"]))
        if "ring_window" in self.bugs or "window_wrap" in self.bugs:
            layer = self.bugs.get("window_wrap", {"layer": None})["layer"]
            wrong = set() if layer is None else (
                {l for l, w in enumerate(self.model.cfg.windows) if w} if layer < 0 else {layer})
            return RingWindowCache(self.model.cfg.windows, wrong)
        if "kv_quantization" in self.bugs:
            b = self.bugs["kv_quantization"]
            return QuantizedCache(L, b["format"], (b["layer"], b["step"], b["scale"] / 100.0),
                                  static=bool(b["static"]))
        return KVCache(L)

    def drafts_per_step(self) -> int:
        """Speculative decoding: draft tokens per step (0 = off)."""
        for name in ("speculative", "speculative_rollback"):
            if name in self.bugs:
                return int(self.bugs[name]["draft"])
        return 0

    def new_chooser(self, temperature: float, seed: int) -> TokenChooser:
        """The request's token chooser, patched by tie_rule / rng_extra_draw."""
        tie = "tie_rule" in self.bugs
        extra = self.bugs["rng_extra_draw"]["step"] if "rng_extra_draw" in self.bugs else None
        if tie and temperature > 0:
            raise ValueError("tie_rule acts on greedy decoding: use temperature 0")
        if extra is not None and temperature <= 0:
            raise ValueError("rng_extra_draw acts on sampling: give a temperature > 0")
        return TokenChooser(temperature, seed, tie_highest=tie, extra_draw_from=extra)

    def positions(self, past: int, n: int, step: int) -> List[int]:
        """Position ids of the fed tokens: past_len + i, or what a position bug makes."""
        b = self.bugs.get("wrong_position")
        if b and step >= b["step"]:
            return [past + b["offset"] + i for i in range(n)]
        b = self.bugs.get("positions_from_zero")
        if b and step >= b["step"]:
            return list(range(n))
        return [past + i for i in range(n)]

    def _log(self, run: RunLog, cache: KVCache, logits: Optional[torch.Tensor], row: int = -1,
             **kw) -> StepLog:
        ring = cache.record(kw["positions"]) if isinstance(cache, RingWindowCache) else None
        ks, vs = cache.snapshot() if ring is None else (None, None)
        st = StepLog(logits=None if logits is None else logits[row].numpy().copy(),
                     cache_keys=ks, cache_values=vs, ring=ring, **kw)
        run.steps.append(st)
        noted = {i["layer"] for i in run.injected if i["bug"] == "window_wrap"}
        for layer, c in sorted(cache.wrapped.items()) if ring is not None else []:
            if layer not in noted:  # the step that first wrote past the wrap, one slot early
                run.injected.append({"bug": "window_wrap", "layer": layer, "step": st.step, "cache_index": c})
        return st

    def run_cached(self, prompt_ids: List[int], max_new: int, temperature: float = 0.0,
                   seed: int = 0) -> RunLog:
        """The cached run of request 0 (and request 1 for cross_request)."""
        if max_new < 1 or not prompt_ids:
            raise ValueError("need a prompt and max_new >= 1")
        run = RunLog("cached")
        run.weights_dirs = [self.model.directory]
        model, version = self.model, 0
        original_dir = model.directory
        cache = self.new_cache()
        run.layer_kinds = layer_kinds(model.cfg.windows, isinstance(cache, RingWindowCache)) or latent_kinds(model)
        chooser = self.new_chooser(temperature, seed)
        tokens: List[int] = []
        fed = list(prompt_ids)
        run.requests.append({"id": 0, "prompt_ids": list(prompt_ids), "generated": tokens,
                             "policy": chooser.policy(), "max_new_tokens": max_new})
        drafts_per_step = self.drafts_per_step()
        if drafts_per_step and temperature > 0:
            raise ValueError("speculative decoding here verifies greedily: use temperature 0")
        try:
            step = -1
            # Chunked prefill: every chunk but the last is a step of its own that chooses
            # nothing; the last one is step `chunks - 1` of the loop below.
            size = self.chunk_size()
            chunks = [list(prompt_ids[i:i + size]) for i in range(0, len(prompt_ids), size)] \
                if size else [list(prompt_ids)]
            for chunk, part in enumerate(chunks[:-1]):
                step += 1
                past = cache.get_seq_length()
                pos, layer_pos = self.chunk_positions(past, len(part), chunk)
                set_latent_form(model, self.bugs, -1)
                model.forward(part, pos, cache, self.unscaled_rope_layers(step), layer_pos)
                self._log(run, cache, None, request=0, step=step, fed_ids=part, positions=pos,
                          chosen=-1, weights_version=version, slot=0,
                          events=["arrival"] if step == 0 else [])
            fed = chunks[-1]
            first_decode = len(chunks)
            while len(tokens) < max_new:
                step += 1
                b = self.bugs.get("stale_cache")
                if b and step == b["step"]:
                    model.load_weights(self.second_model)  # new weights, the old cache kept
                    version = 1
                    run.weights_dirs.append(self.second_model)
                    run.injected.append({"bug": "stale_cache", "step": step, "weights": self.second_model})
                b = self.bugs.get("cross_request")
                if b and step == b["step"]:
                    self._reuse_slot(run, cache, b, list(prompt_ids) + tokens[:step - 1],
                                     temperature, seed, version)
                past = cache.get_seq_length()
                draft: List[int] = []
                if drafts_per_step and step >= first_decode:
                    budget = min(drafts_per_step, max_new - len(tokens) - 1)
                    draft = prompt_lookup(list(prompt_ids) + tokens, budget) if budget > 0 else []
                fed = fed + draft
                layer_pos = None
                if step < first_decode:  # the prefill's last (or only) chunk
                    pos, layer_pos = self.chunk_positions(past, len(fed), step)
                if step >= first_decode or not size:
                    pos = self.positions(past, len(fed), step)
                set_latent_form(model, self.bugs, step if step >= first_decode else -1)
                logits = model.forward(fed, pos, cache, self.unscaled_rope_layers(step), layer_pos)
                accepted = 0  # greedy verification: draft j stands while row j chooses it
                while accepted < len(draft) and chooser.choose(logits[len(fed) - len(draft) - 1 + accepted], step)[0] == draft[accepted]:
                    accepted += 1
                row = len(fed) - len(draft) - 1 + accepted
                tok, before, after = chooser.choose(logits[row], step)
                if draft:  # drop the rejected drafts' rows: past + fed token + accepted ones
                    if isinstance(cache, NoCropCache):
                        cache.step = step
                    cache.crop(past + len(fed) - len(draft) + accepted)
                self._log(run, cache, logits, row=row, request=0, step=step, fed_ids=fed, positions=pos,
                          chosen=tok, weights_version=version, slot=0,
                          events=["arrival"] if step == 0 else [], rng_before=before, rng_after=after,
                          draft_count=len(draft), accepted_count=accepted)
                tokens.extend(draft[:accepted])
                tokens.append(tok)
                fed = [tok]
        finally:
            if model.directory != original_dir:
                model.load_weights(original_dir)
        self._note_injections(run)
        if isinstance(cache, QuantizedCache):
            run.kv_cache = cache.header()
        if isinstance(cache, NoCropCache):
            b = self.bugs["speculative_rollback"]
            run.injected.append({"bug": "speculative_rollback", "draft": b["draft"], "from_step": b["step"],
                                 "step": cache.skipped[0] if cache.skipped else None,
                                 "skipped_steps": list(cache.skipped)})
        return run

    def _reuse_slot(self, run: RunLog, cache: KVCache, bug: dict, stream0: List[int],
                    temperature: float, seed: int, version: int) -> None:
        """cross_request: request 1 arrives and is prefilled into request 0's cache object
        (the slot is cleared and refilled, as a reused slot is); request 0 is not told."""
        other = bug["prompt"] or list(reversed(stream0))
        chooser = TokenChooser(temperature, seed + 1)
        cache.reset()
        pos = list(range(len(other)))
        set_latent_form(self.model, self.bugs, -1)
        logits = self.model.forward(other, pos, cache)
        tok, before, after = chooser.choose(logits[-1], 0)
        run.requests.append({"id": 1, "prompt_ids": other, "generated": [tok],
                             "policy": chooser.policy(), "max_new_tokens": 1})
        self._log(run, cache, logits, request=1, step=0, fed_ids=other, positions=pos, chosen=tok,
                  weights_version=version, slot=0, events=["arrival"], rng_before=before,
                  rng_after=after)
        run.injected.append({"bug": "cross_request", "step": bug["step"], "victim_request": 0,
                             "other_prompt_len": len(other)})

    def _note_injections(self, run: RunLog) -> None:
        """Adds where the loop/cache bugs acted to run.injected."""
        for name in ("wrong_layer", "duplicate_append", "wrong_position", "positions_from_zero",
                     "rng_extra_draw", "speculative", "kv_cache", "kv_quantization", "rope_scaling",
                     "prefill_chunk", "chunk_position", "ring_window", "mla_absorbed", "mla_absorb", "mla_heads"):
            if name in self.bugs:
                run.injected.append({"bug": name, **{k: v for k, v in self.bugs[name].items() if k != "name"}})
        if "tie_rule" in self.bugs:
            ties = [s.step for s in run.steps if len(s.tied) > 1]
            flips = [s.step for s in run.steps if len(s.tied) > 1 and s.chosen != s.tied[0]]
            run.injected.append({"bug": "tie_rule", "tie_steps": ties, "step": flips[0] if flips else None,
                                 "tied_tokens": run.steps[flips[0]].tied if flips else []})

    def run_uncached(self, prompt_ids: List[int], max_new: int, temperature: float = 0.0,
                     seed: int = 0) -> RunLog:
        """The reference run: every step recomputes the whole prefix in a fresh cache and
        records the last position's logits and that pass's full cache. Only the policy
        bugs (tie_rule, rng_extra_draw) apply."""
        if set(self.bugs) - set(POLICY_BUGS):
            raise ValueError(f"the uncached reference takes only policy bugs {POLICY_BUGS}, not "
                             f"{sorted(set(self.bugs) - set(POLICY_BUGS))}")
        if max_new < 1 or not prompt_ids:
            raise ValueError("need a prompt and max_new >= 1")
        run = RunLog("uncached")
        run.weights_dirs = [self.model.directory]
        run.layer_kinds = layer_kinds(self.model.cfg.windows, False) or latent_kinds(self.model)
        set_latent_form(self.model, self.bugs, -1)
        chooser = self.new_chooser(temperature, seed)
        tokens: List[int] = []
        run.requests.append({"id": 0, "prompt_ids": list(prompt_ids), "generated": tokens,
                             "policy": chooser.policy(), "max_new_tokens": max_new})
        stream = list(prompt_ids)
        for step in range(max_new):
            cache = KVCache(self.model.cfg.num_layers)
            logits = self.model.forward(stream, list(range(len(stream))), cache)
            tok, before, after = chooser.choose(logits[-1], step)
            fed = stream if step == 0 else stream[-1:]
            pos = list(range(len(stream))) if step == 0 else [len(stream) - 1]
            self._log(run, cache, logits, request=0, step=step, fed_ids=list(fed), positions=pos,
                      chosen=tok, slot=0, events=["arrival"] if step == 0 else [],
                      rng_before=before, rng_after=after)
            tokens.append(tok)
            stream.append(tok)
        self._note_injections(run)
        return run
