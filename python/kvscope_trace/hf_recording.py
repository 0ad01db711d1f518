"""A recorder a researcher wraps around their own transformers code:

    from kvscope_trace import recording
    with recording(model, "run.kvtrace"):
        model.generate(input_ids, max_new_tokens=32)

Every `model.generate(...)` inside the block becomes one request of the trace, written when the
block ends. The model's forward is watched: each forward is one step (its fed tokens and
positions, the logits row of its last token), and its cache's `update()` calls give the step's
own K/V per layer (what transformers' sliding layers keep is not what they were handed; see
hf_trace.watch_updates). A step's chosen token is the token the next forward feeds, the last
one the token generate returned last. The policy comes from generate's arguments and the
model's generation config: greedy, or sampled with torch's generator (`"generator": "torch"`:
the audit checks what the logits prove and reports the replay `not checked`).

Batch size 1 per generate call (several calls make several requests); a batched or
left-padded generate is refused with that reason rather than recorded wrongly.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, Iterator, List, Optional

from . import trace as kvtrace
from .hf_trace import (APPENDED_ATTR, ENGINE, TraceRecorder, begin_forward, cache_length,
                       model_info, to_numpy, watch_updates)


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
    def __init__(self, model, path: str, model_dir: Optional[str], store: str, fingerprint: bool):
        import torch
        import transformers

        self.model, self.path = model, path
        self.torch = torch
        directory = model_dir or getattr(model, "name_or_path", "") or ""
        emb = model.get_output_embeddings()
        vocab = int(emb.weight.shape[0]) if emb is not None else int(model.config.vocab_size)
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        info = model_info(model.config, directory, vocab, dtype,
                          fingerprint=fingerprint and os.path.isdir(directory))
        engine = f"{ENGINE} recording (transformers {transformers.__version__}, torch {torch.__version__})"
        self.rec = TraceRecorder(info, engine=engine, mode="cached", dtype=store)
        self.request = -1
        self.step = 0
        self.pending = None  # the last step, whose chosen token the next forward feeds
        self.prompt: List[int] = []

    # -- model.forward
    def forward(self, inner, *args, **kwargs):
        if self.request < 0:  # a forward outside generate: not a step of any request
            return inner(*args, **kwargs)
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise ValueError("kvscope_trace.recording: a forward without input_ids (inputs_embeds) "
                             "cannot be recorded")
        if ids.shape[0] != 1:
            raise NotImplementedError(f"kvscope_trace.recording: generate with batch size {ids.shape[0]}: "
                                      "one sequence per generate call is recorded today")
        cache = kwargs.get("past_key_values")
        if cache is not None and not hasattr(cache, APPENDED_ATTR) and hasattr(cache, "update"):
            watch_updates(cache)
        begin_forward(cache)
        fed = [int(t) for t in ids[0].tolist()]
        past = self._consumed(cache)
        out = inner(*args, **kwargs)
        positions = kwargs.get("position_ids")
        if positions is not None:
            positions = [int(p) for p in positions[0].tolist()]
        else:
            positions = list(range(past, past + len(fed)))
        if self.pending is not None:
            self.pending.chosen = fed[0]
        logits = to_numpy(out.logits[0, -1]).reshape(-1)
        st = self.rec.record_step(self.request, self.step, fed, positions, logits, -1,
                                  cache=getattr(out, "past_key_values", None) or cache,
                                  events=["arrival"] if self.step == 0 else [])
        self.pending, self.step = st, self.step + 1
        return out

    def _consumed(self, cache) -> int:
        if cache is None:
            return 0
        layers = getattr(cache, "layers", None) or []
        full = [i for i, l in enumerate(layers) if not getattr(l, "is_sliding", False)]
        if hasattr(cache, "get_seq_length"):
            return int(cache.get_seq_length(full[0] if full else 0))
        return cache_length(cache)

    # -- model.generate
    def generate(self, inner, *args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or getattr(ids, "ndim", 0) != 2:
            raise ValueError("kvscope_trace.recording: call generate with input_ids [1, prompt]")
        if ids.shape[0] != 1:
            raise NotImplementedError(f"kvscope_trace.recording: generate with batch size {ids.shape[0]}: "
                                      "one sequence per generate call is recorded today")
        mask = kwargs.get("attention_mask")
        if mask is not None and int(mask.sum()) != mask.numel():
            raise NotImplementedError("kvscope_trace.recording: a padded prompt (attention_mask with "
                                      "zeros) is not recorded today")
        self.request += 1
        self.step, self.pending = 0, None
        self.prompt = [int(t) for t in ids[0].tolist()]
        eos = _eos_ids(self.model, kwargs)
        max_new = kwargs.get("max_new_tokens") or getattr(self.model.generation_config, "max_new_tokens", 0) or 0
        self.rec.begin_request(self.request, self.prompt, policy=_generate_policy(self.model, kwargs),
                               max_new_tokens=int(max_new), eos_ids=eos)
        try:
            out = inner(*args, **kwargs)
        except BaseException:
            self.request -= 1  # nothing of a failed call is kept as a finished request
            raise
        seq = getattr(out, "sequences", out)
        generated = [int(t) for t in seq[0].tolist()[len(self.prompt):]]
        if self.pending is not None and generated:
            self.pending.chosen = generated[-1]
        stop = "eos" if generated and generated[-1] in eos else "max_new_tokens"
        if stop == "eos":
            self.pending.events.append("eos")
        self.rec.finish_request(self.request, generated, stop)
        self.pending = None
        return out


@contextlib.contextmanager
def recording(model, path: str, model_dir: Optional[str] = None, store: str = "F32",
              fingerprint: bool = True) -> Iterator[TraceRecorder]:
    """Records every `model.generate(...)` in the block into the trace `path` (written on a
    normal exit; nothing is written when the block raises). `model_dir`: the checkpoint
    directory, for the trace's model block and fingerprint (default: model.name_or_path)."""
    if store not in kvtrace.STORE_DTYPES:
        raise ValueError(f"store {store!r}: one of {', '.join(kvtrace.STORE_DTYPES)}")
    r = _Recording(model, path, model_dir, store, fingerprint)
    own = {n: model.__dict__[n] for n in ("forward", "generate") if n in model.__dict__}
    inner_forward, inner_generate = model.forward, model.generate
    model.forward = lambda *a, **kw: r.forward(inner_forward, *a, **kw)
    model.generate = lambda *a, **kw: r.generate(inner_generate, *a, **kw)
    try:
        yield r.rec
    finally:  # the methods as they were (an instance's own, e.g. a hook's, or the class's)
        for n in ("forward", "generate"):
            if n in own:
                setattr(model, n, own[n])
            else:
                delattr(model, n)
    if r.request < 0:
        raise ValueError(f"kvscope_trace.recording: no generate call inside the block; {path} not written")
    r.rec.save(path)
