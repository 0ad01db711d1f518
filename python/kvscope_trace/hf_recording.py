"""A recorder a researcher wraps around their own transformers code:

    from kvscope_trace import recording
    with recording(model, "run.kvtrace"):
        model.generate(input_ids, max_new_tokens=32)

Every `model.generate(...)` inside the block becomes one request of the trace, written when the
block ends. The model's forward is watched: each forward is one step (its fed tokens and
positions, the logits row of its last token), and its cache's `update()` calls give the step's
own K/V per layer (what transformers' sliding layers keep is not what they were handed; see
hf_trace.watch_updates; a recurrent layer, Qwen3.5's Gated DeltaNet, calls none and is
recorded as layer_kinds "recurrent" with no records, and with its state after the forward,
each row's, at the prefill and every `state_every`-th decode step: default 1, every step; 0,
never). A step's chosen token is the token the
next forward feeds, the last one the token generate returned last. The policy comes from
generate's arguments and the model's generation config: greedy, or sampled with torch's
generator (`"generator": "torch"`: the audit checks what the logits prove and reports the
replay `not checked`).

A batched generate makes one request per row, the rows one batch group (`batch_group`) whose
steps share their ticks; left padding is recorded as padding (`fed_mask` 0: it holds a cache
slot and is no part of the request's stream), with the positions the model was given
(`position_ids`, else the cache positions, which transformers 4.57 and 5 use for every row: a
left-padded row's tokens then sit past its pads; of M-RoPE's position planes, Qwen3.5's, the
first: the text positions). A row that stops at EOS has no steps after it (generate feeds it
pads). A mask that is not left padding is refused with that reason.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Dict, Iterator, List, Optional

from . import trace as kvtrace
from .hf_trace import (APPENDED_ATTR, ENGINE, TraceRecorder, begin_forward, config_layer_types, latent_attention,
                       consumed_length, latent_records, model_info, to_numpy, watch_updates)


def _generate_policy(model, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The sampling policy generate runs with: its keyword arguments over the generation
    config (transformers' defaults: top_k 50 when sampling)."""
    cfg = kwargs.get("generation_config") or getattr(model, "generation_config", None)

    def get(name, default=None):
        if name in kwargs:
            return kwargs[name]
        return getattr(cfg, name, default) if cfg is not None else default

    if not get("do_sample", False):
        return {"temperature": 0.0, "generator": "torch"}
    top_k, top_p = get("top_k", 50), get("top_p", 1.0)
    return {"temperature": float(get("temperature", 1.0) or 1.0),
            "top_k": int(top_k) if top_k else None,
            "top_p": float(top_p) if top_p is not None and float(top_p) < 1.0 else None,
            "generator": "torch"}


def _eos_ids(model, kwargs: Dict[str, Any]) -> List[int]:
    cfg = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    eos = kwargs.get("eos_token_id", getattr(cfg, "eos_token_id", None))
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]


class _Recording:
    def __init__(self, model, path: str, model_dir: Optional[str], store: str, fingerprint: bool,
                 state_every: int = 1):
        import torch
        import transformers

        self.model, self.path = model, path
        self.torch = torch
        directory = model_dir or getattr(model, "name_or_path", "") or ""
        emb = model.get_output_embeddings()
        vocab = int(emb.weight.shape[0]) if emb is not None else int(model.config.vocab_size)
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        info = model_info(model.config, directory, vocab, dtype,
                          fingerprint=fingerprint and os.path.isdir(directory),
                          latent_layout=latent_records(model.config, transformers.__version__))
        attn = getattr(model.config, "_attn_implementation", None) or "default"
        engine = (f"{ENGINE} recording (transformers {transformers.__version__}, "
                  f"torch {torch.__version__}, attention {attn})")
        from .hf_routing import ExpertTap
        self.experts = ExpertTap(model, info["num_layers"])  # a mixture of experts' routers
        self.rec = TraceRecorder(info, engine=engine, mode="cached", dtype=store,
                                 expert_tap=self.experts if self.experts.active else None,
                                 layer_types=config_layer_types(model.config), state_every=state_every,
                                 latent=latent_attention(model.config))
        self.requests = 0       # requests recorded so far (ids 0..requests-1)
        self.groups = 0         # batch groups so far
        self.rows: List[int] = []  # the running generate call's request id per batch row
        self.eos: List[int] = []
        self.step = 0
        self.pending: List[Any] = []   # per row: its last step, whose token the next forward feeds
        self.finished: List[bool] = []  # per row: stopped at EOS (generate feeds it pads after)

    # -- model.forward
    def forward(self, inner, *args, **kwargs):
        if not self.rows:  # a forward outside generate: not a step of any request
            return inner(*args, **kwargs)
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise ValueError("kvscope_trace.recording: a forward without input_ids (inputs_embeds) "
                             "cannot be recorded")
        if ids.shape[0] != len(self.rows):
            raise ValueError(f"kvscope_trace.recording: a forward of {ids.shape[0]} rows inside a "
                             f"generate call of {len(self.rows)}")
        cache = kwargs.get("past_key_values")
        if cache is not None and not hasattr(cache, APPENDED_ATTR) and hasattr(cache, "update"):
            watch_updates(cache)
        begin_forward(cache)
        past = self._consumed(cache)
        out = inner(*args, **kwargs)
        # The positions the model used: position_ids when generate passed them, else the cache
        # positions every row shares (transformers 4.57 and 5 derive position_ids from them).
        given = kwargs.get("position_ids")
        if given is not None and given.ndim == 3:
            # M-RoPE (Qwen3.5, Qwen2-VL, ...): [4 (text, t, h, w) or 3 (t, h, w), B, T]; the
            # first plane is the text positions (equal to the others without an image)
            given = given[0]
        if given is None and kwargs.get("cache_position") is not None:
            given = kwargs["cache_position"].reshape(1, -1).expand(ids.shape[0], -1)
        mask = kwargs.get("attention_mask")
        tick = self.rec.tick
        s = ids.shape[1]
        for b, request in enumerate(self.rows):
            fed = [int(t) for t in ids[b].tolist()]
            if self.pending[b] is not None:
                self.pending[b].chosen = fed[0]
                if fed[0] in self.eos:
                    self.finished[b] = True
            if self.finished[b]:
                continue  # generate keeps feeding a stopped row pads; it is not a step of it
            positions = ([int(p) for p in given[b].tolist()] if given is not None
                         else list(range(past, past + s)))
            fed_mask = None
            if mask is not None and mask.ndim == 2 and int(mask[b, -s:].sum()) != s:
                fed_mask = [int(x) for x in mask[b, -s:].tolist()]
            logits = to_numpy(out.logits[b, -1]).reshape(-1)
            self.pending[b] = self.rec.record_step(
                request, self.step, fed, positions, logits, -1,
                cache=getattr(out, "past_key_values", None) or cache,
                events=["arrival"] if self.step == 0 else [], batch_index=b,
                slot=b if len(self.rows) > 1 else request, fed_mask=fed_mask, tick=tick,
                batch_rows=len(self.rows))
        self.step += 1
        return out

    def _consumed(self, cache) -> int:
        return consumed_length(cache)

    # -- model.generate
    def generate(self, inner, *args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or getattr(ids, "ndim", 0) != 2:
            raise ValueError("kvscope_trace.recording: call generate with input_ids [batch, prompt]")
        B, T = int(ids.shape[0]), int(ids.shape[1])
        mask = kwargs.get("attention_mask")
        prompts = []
        for b in range(B):
            row = [int(t) for t in ids[b].tolist()]
            if mask is None:
                prompts.append(row)
                continue
            m = [int(x) for x in mask[b].tolist()]
            pads = T - sum(m)
            if m != [0] * pads + [1] * (T - pads):
                raise NotImplementedError(f"kvscope_trace.recording: row {b} of attention_mask is "
                                          f"{m}: only left padding (zeros, then ones) is recorded")
            prompts.append(row[pads:])
        self.rows = list(range(self.requests, self.requests + B))
        self.step, self.pending, self.finished = 0, [None] * B, [False] * B
        self.eos = _eos_ids(self.model, kwargs)
        max_new = kwargs.get("max_new_tokens") or getattr(self.model.generation_config, "max_new_tokens", 0) or 0
        group = self.groups if B > 1 else -1
        for b, request in enumerate(self.rows):
            self.rec.begin_request(request, prompts[b], policy=_generate_policy(self.model, kwargs),
                                   max_new_tokens=int(max_new), eos_ids=self.eos, batch_group=group,
                                   arrival_tick=self.rec.tick)
        try:
            out = inner(*args, **kwargs)
        except BaseException:
            self.rows = []  # nothing of a failed call is kept as a finished request
            raise
        seq = getattr(out, "sequences", out)
        for b, request in enumerate(self.rows):
            generated = [int(t) for t in seq[b].tolist()[T:]]
            stops = [i for i, t in enumerate(generated) if t in self.eos]
            if stops:
                generated = generated[:stops[0] + 1]  # what follows the EOS is generate's padding
            if self.pending[b] is not None and generated and not self.finished[b]:
                self.pending[b].chosen = generated[-1]
            stop = "eos" if stops else "max_new_tokens"
            if stop == "eos" and self.pending[b] is not None:
                self.pending[b].events.append("eos")
            self.rec.finish_request(request, generated, stop)
        self.requests += B
        self.groups += 1 if B > 1 else 0
        self.rows = []
        return out
@contextlib.contextmanager
def recording(model, path: str, model_dir: Optional[str] = None, store: str = "F32",
              fingerprint: bool = True, state_every: int = 1) -> Iterator[TraceRecorder]:
    """Records every `model.generate(...)` in the block into the trace `path` (written on a
    normal exit; nothing is written when the block raises). `model_dir`: the checkpoint
    directory, for the trace's model block and fingerprint (default: model.name_or_path).
    `state_every`: on a model with recurrent layers (Qwen3.5's Gated DeltaNet), record their
    state after the prefill and every N-th decode step (1: every step; 0: never)."""
    if store not in kvtrace.STORE_DTYPES:
        raise ValueError(f"store {store!r}: one of {', '.join(kvtrace.STORE_DTYPES)}")
    if not isinstance(state_every, int) or isinstance(state_every, bool) or state_every < 0:
        raise ValueError(f"state_every {state_every!r}: a non-negative integer (0: no states)")
    r = _Recording(model, path, model_dir, store, fingerprint, state_every)
    own = {n: model.__dict__[n] for n in ("forward", "generate") if n in model.__dict__}
    inner_forward, inner_generate = model.forward, model.generate
    # The wrappers keep the methods' signatures (functools.wraps: inspect.signature follows
    # __wrapped__): generate passes position_ids only to a forward whose signature names them,
    # so a bare (*args, **kwargs) wrapper would change the run it records (a left-padded row's
    # positions).
    model.forward = functools.wraps(inner_forward)(lambda *a, **kw: r.forward(inner_forward, *a, **kw))
    model.generate = functools.wraps(inner_generate)(lambda *a, **kw: r.generate(inner_generate, *a, **kw))
    try:
        yield r.rec
    finally:  # the methods as they were (an instance's own, e.g. a hook's, or the class's)
        r.experts.close()
        for n in ("forward", "generate"):
            if n in own:
                setattr(model, n, own[n])
            else:
                delattr(model, n)
    if r.requests == 0:
        raise ValueError(f"kvscope_trace.recording: no generate call inside the block; {path} not written")
    r.rec.save(path)
