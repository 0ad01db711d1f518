#!/usr/bin/env python3
"""A prefix cache for the independent torch engine (written from what vLLM's automatic prefix
caching and SGLang's radix cache do, not from KV Scope's code), and runs of several requests
through it.

    record_prefix(model_dir, out_path, prompts, max_new, dtype, spec)
    record_uncached(model_dir, out_path, prompts, max_new, dtype)   # the reference of each

    python3 tests/independent/prefix_cache.py --model DIR --prompt-ids 1,2,3,4,5 \
        --prompt-ids 1,2,3,4,9 --max-new N [--spec prefix_reuse:block=4,layer=-1] \
        [--dtype bfloat16] [--uncached] --out FILE.kvtrace

The requests run one after another, each alone in a cache of its own (its slot). After a
request's prefill its prompt rows are kept in the store under its prompt's blocks of B
tokens. A later request looks its prompt up block by block: the longest run of whole blocks
that a kept prompt begins with, leaving at least its last prompt token to compute, is a hit
of N = blocks * B entries. The request's cache then starts with copies of those N rows of
every layer, and its first step feeds only prompt[N:] at positions N.. over them; the trace
records the hit (reused_count N, reused_from, reused_blocks: the blocks' chained hashes).

Options (`NAME[:k=v,...]`):
  prefix_cache:block=B              not a bug: the cache above
  prefix_reuse:block=B,layer=L      the lookup compares a block's tokens without its last
                                    one (a hash over too few tokens): a prompt that differs
                                    from a kept one only at a block's last token is handed
                                    the kept block. layer -1: every layer takes the kept
                                    rows; layer L: the block table is per layer and only
                                    layer L's points at the kept blocks; the other layers
                                    take the rightly matched blocks and compute the rest of
                                    the span (a forward over their cache) before the step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Dict, List, Optional, Tuple

import torch

from record_run import write_trace
from torch_engine import DecodeEngine, RunLog, StepLog, TokenChooser
from torch_model import KVCache, Model

PREFIX_PARAMS = {"prefix_cache": {"block": 4}, "prefix_reuse": {"block": 4, "layer": -1}}


def parse_prefix(spec: str) -> Dict[str, int]:
    """`prefix_cache[:block=B]` / `prefix_reuse[:block=B,layer=L]` -> {"name", "block", ...}."""
    name, _, rest = str(spec).partition(":")
    if name not in PREFIX_PARAMS:
        raise ValueError(f"unknown prefix-cache option {name!r} (known: {', '.join(PREFIX_PARAMS)})")
    out: Dict[str, object] = {"name": name, **PREFIX_PARAMS[name]}
    for kv in filter(None, rest.split(",")):
        k, eq, v = kv.partition("=")
        if not eq or k.strip() not in PREFIX_PARAMS[name]:
            raise ValueError(f"{name}: parameter {kv!r} is not one of {', '.join(PREFIX_PARAMS[name])}=N")
        try:
            out[k.strip()] = int(v)
        except ValueError:
            raise ValueError(f"{name}: {k}={v!r} is not an integer") from None
    if out["block"] < 1:
        raise ValueError(f"{name}: block {out['block']} must be >= 1")
    return out


class PrefixStore:
    """Kept prompts: per request its prompt and float copies of its rows [1, h_kv, t, d]."""

    def __init__(self, block: int):
        self.block = block
        self.kept: List[Tuple[int, List[int], List[torch.Tensor], List[torch.Tensor]]] = []

    def keep(self, request: int, prompt: List[int], cache: KVCache) -> None:
        n = len(prompt)
        self.kept.append((request, list(prompt), [k[:, :, :n].clone() for k in cache.keys],
                          [v[:, :, :n].clone() for v in cache.values]))

    def _key(self, tokens: List[int], j: int, short: bool) -> List[int]:
        """What block j's lookup compares: its B tokens, or (short) all but the last."""
        B = self.block
        return tokens[j * B:(j + 1) * B - (1 if short else 0)]

    def lookup(self, prompt: List[int], short: bool = False):
        """(N, kept entry or None, block ids) of the longest hit; the earliest kept prompt wins
        a tie. Whole blocks only, the prompt's last token always left to compute."""
        B, usable = self.block, (len(prompt) - 1) // self.block
        best, best_n = None, 0
        for entry in self.kept:
            other = entry[1]
            j = 0
            while j < usable and (j + 1) * B <= len(other) and \
                    self._key(prompt, j, short) == self._key(other, j, short):
                j += 1
            if j * B > best_n:
                best, best_n = entry, j * B
        ids, h = [], hashlib.sha256()
        for j in range(best_n // B):  # chained hashes of what the lookup compared
            h.update(repr(self._key(prompt, j, short)).encode())
            ids.append(int(h.hexdigest()[:15], 16))
        return best_n, best, ids


def start_cache(model: Model, store: PrefixStore, prompt: List[int], bug: Optional[Dict[str, int]]):
    """A request's cache before its first step: (cache, N reused, source request or -1,
    block ids). With prefix_reuse the short lookup decides N and which rows are handed over."""
    L = model.cfg.num_layers
    cache = KVCache(L)
    right_n, right, right_ids = store.lookup(prompt)
    if not bug:
        n, source, ids = right_n, right, right_ids
    else:
        n, source, ids = store.lookup(prompt, short=True)
    if n == 0:
        return cache, 0, -1, None
    if bug and bug["layer"] >= 0:
        # A per-layer block table: layer `layer` points at the short lookup's blocks, the other
        # layers at the rightly matched ones, whose cache then computes the rest of the span.
        if right_n:
            cache.keys = [k[:, :, :right_n].clone() for k in right[2]]
            cache.values = [v[:, :, :right_n].clone() for v in right[3]]
        if right_n < n:
            model.forward(prompt[right_n:n], list(range(right_n, n)), cache)
        l = bug["layer"]
        cache.keys[l], cache.values[l] = source[2][l][:, :, :n].clone(), source[3][l][:, :, :n].clone()
    else:
        cache.keys = [k[:, :, :n].clone() for k in source[2]]
        cache.values = [v[:, :, :n].clone() for v in source[3]]
    return cache, n, source[0], ids


def run_prefix(model: Model, prompts: List[List[int]], max_new: int, spec: str,
               temperature: float = 0.0, seed: int = 0) -> RunLog:
    """The requests one after another through the prefix cache; request i in slot i, its
    chooser seeded seed + i. `injected` says where prefix_reuse handed over a wrong block."""
    opt = parse_prefix(spec)
    bug = opt if opt["name"] == "prefix_reuse" else None
    if bug and not -1 <= bug["layer"] < model.cfg.num_layers:
        raise ValueError(f"prefix_reuse: layer {bug['layer']} is not a layer of this model (-1: every layer)")
    if max_new < 1 or not prompts or not all(prompts):
        raise ValueError("need prompts and max_new >= 1")
    store = PrefixStore(opt["block"])
    run = RunLog("cached")
    run.weights_dirs = [model.directory]
    for rid, prompt in enumerate(prompts):
        prompt = list(prompt)
        cache, n, source, ids = start_cache(model, store, prompt, bug)
        chooser = TokenChooser(temperature, seed + rid)
        tokens: List[int] = []
        run.requests.append({"id": rid, "prompt_ids": prompt, "generated": tokens,
                             "policy": chooser.policy(), "max_new_tokens": max_new})
        if bug and n:
            right_n = store.lookup(prompt)[0]
            if n > right_n:  # the first token whose row is another prompt's
                wrong = next(p for p in range(right_n, n) if prompt[p] != run.requests[source]["prompt_ids"][p])
                run.injected.append({"bug": "prefix_reuse", "request": rid, "source": source, "step": 0,
                                     "layer": max(bug["layer"], 0), "position": wrong,
                                     "reused": n, "right_reused": right_n})
        fed, pos = prompt[n:], list(range(n, len(prompt)))
        for step in range(max_new):
            logits = model.forward(fed, pos, cache)
            tok, before, after = chooser.choose(logits[-1], step)
            ks, vs = cache.snapshot()
            st = StepLog(request=rid, step=step, fed_ids=fed, positions=pos, chosen=tok,
                         logits=logits[-1].numpy().copy(), cache_keys=ks, cache_values=vs, slot=rid,
                         events=["arrival"] if step == 0 else [], rng_before=before, rng_after=after)
            if step == 0:
                st.reused_count, st.reused_from, st.reused_blocks = n, source, ids
                store.keep(rid, prompt, cache)
            run.steps.append(st)
            tokens.append(tok)
            fed, pos = [tok], [cache.get_seq_length()]
    if opt["name"] == "prefix_cache" or not run.injected:  # step None: no wrong block handed over
        run.injected.append({"bug": opt["name"], "block": opt["block"], "step": None,
                             "hits": [(s.request, s.reused_count) for s in run.steps if getattr(s, "reused_count", 0)]})
    return run


def run_uncached(model: Model, prompts: List[List[int]], max_new: int, temperature: float = 0.0,
                 seed: int = 0) -> RunLog:
    """Every prompt's uncached reference run (DecodeEngine.run_uncached), request i in slot i."""
    out = RunLog("uncached")
    out.weights_dirs = [model.directory]
    for rid, prompt in enumerate(prompts):
        run = DecodeEngine(model).run_uncached(list(prompt), max_new, temperature, seed + rid)
        out.requests.append(dict(run.requests[0], id=rid))
        for s in run.steps:
            s.request, s.slot = rid, rid
            out.steps.append(s)
    return out


def record_prefix(model_dir: str, out_path: str, prompts: List[List[int]], max_new: int,
                  dtype: str = "float32", spec: str = "prefix_cache", **kw) -> Dict[str, object]:
    """Runs the prompts through the prefix cache and writes the trace; returns a summary."""
    model = Model(model_dir, dtype)
    run = run_prefix(model, prompts, max_new, spec, **kw)
    write_trace(run, model, out_path)
    return {"out": out_path, "injected": run.injected,
            "hits": {s.request: (s.reused_count, s.reused_from) for s in run.steps if getattr(s, "reused_count", 0)},
            "requests": {r["id"]: list(r["generated"]) for r in run.requests}}


def record_uncached(model_dir: str, out_path: str, prompts: List[List[int]], max_new: int,
                    dtype: str = "float32", **kw) -> Dict[str, object]:
    model = Model(model_dir, dtype)
    run = run_uncached(model, prompts, max_new, **kw)
    write_trace(run, model, out_path)
    return {"out": out_path, "requests": {r["id"]: list(r["generated"]) for r in run.requests}}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="prefix_cache.py", description="requests through a prefix cache")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", action="append", required=True, help="one request's comma-separated ids")
    ap.add_argument("--max-new", type=int, required=True)
    ap.add_argument("--spec", default="prefix_cache:block=4", help="prefix_cache[:block=B] or "
                    "prefix_reuse[:block=B,layer=L]")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--uncached", action="store_true", help="the uncached reference of every request")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        prompts = [[int(t) for t in p.split(",") if t.strip()] for p in args.prompt_ids]
        if args.uncached:
            info = record_uncached(args.model, args.out, prompts, args.max_new, args.dtype)
        else:
            info = record_prefix(args.model, args.out, prompts, args.max_new, args.dtype, args.spec)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
