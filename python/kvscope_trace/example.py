"""Writes a deterministic example trace with known values for the llama fixture's shape
(num_layers 3, num_kv_heads 2, head_dim 16, vocab 1200, max positions 128). The C++ test
tests/core/PythonTraceTest.cpp reads it and checks every value against the same formulas:

    key(l, h, c, j, w)   = 1000 l + 100 h + c + j / 32 + w / 2   (c: cache column,
    value(l, h, c, j, w) = -key(l, h, c, j, w)                    j: head_dim index,
    logit(i, v)          = -(v % 97) / 4, except logit(i, chosen) = 10 + i    w: weights version)

All values are exact in float32. Requests (ticks in brackets):
    request 0: prompt [0, 34, 86], greedy, generates [422, 623, 17]
        [0] step 0 prefill  [2] step 1 feeds 422  [4] step 2 rebuilds: feeds the whole stream
    request 1: prompt [0, 316, 284, 7], T=0.8 top-k 50 seed 11, arrives at tick 1, generates [5, 6]
        [1] step 0 prefill  [3] step 1 rebuilds after the weight update at tick 3

    python3 -m kvscope_trace.example OUT.kvtrace [--snapshots-only] [--snapshots] [--dtype F16]
"""

import argparse
import sys

import numpy as np

from . import trace as kvtrace

MODEL = {"fingerprint": "", "architecture": "llama", "directory": "tests/fixtures/hf/models/llama",
         "num_layers": 3, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16, "vocab_size": 1200,
         "max_positions": 128, "stored_dtype": "F32", "compute_dtype": "float32"}

# request, step, tick, fed, positions, chosen, weights version, events, draws before/after
STEPS = [
    (0, 0, 0, [0, 34, 86], [0, 1, 2], 422, 0, ["arrival"], 0, 0),
    (1, 0, 1, [0, 316, 284, 7], [0, 1, 2, 3], 5, 0, ["arrival"], 0, 1),
    (0, 1, 2, [422], [3], 623, 0, [], 0, 0),
    (1, 1, 3, [0, 316, 284, 7, 5], [0, 1, 2, 3, 4], 6, 1, ["cache_reset"], 1, 2),
    (0, 2, 4, [0, 34, 86, 422, 623], [0, 1, 2, 3, 4], 17, 1, ["cache_reset"], 0, 0),
]


def records(layer: int, begin: int, end: int, version: int):
    """Keys and values [2, end - begin, 16] for cache columns [begin, end)."""
    h = np.arange(2, dtype=np.float32)[:, None, None]
    c = np.arange(begin, end, dtype=np.float32)[None, :, None]
    j = np.arange(16, dtype=np.float32)[None, None, :]
    k = 1000 * layer + 100 * h + c + j / 32 + version / 2
    k = k.astype(np.float32)
    return k, -k


def logits(i: int, chosen: int) -> np.ndarray:
    row = -(np.arange(1200) % 97).astype(np.float32) / 4
    row[chosen] = 10 + i
    return row


def build(snapshots: bool, appended: bool, dtype: str = "F32") -> kvtrace.TraceWriter:
    w = kvtrace.TraceWriter(MODEL, engine="make_example_trace.py", dtype=dtype)
    w.add_request(0, prompt_ids=[0, 34, 86], prompt_text="Audit", generated=[422, 623, 17],
                  max_new_tokens=3, eos_ids=[1], stop_reason="max_new_tokens")
    w.add_request(1, prompt_ids=[0, 316, 284, 7], generated=[5, 6], max_new_tokens=2, eos_ids=[1],
                  policy={"temperature": 0.8, "top_k": 50, "top_p": None, "seed": 11},
                  stop_reason="max_new_tokens", arrival_tick=1)
    w.add_event("weight_update", tick=3, tensor="model.layers.0.self_attn.k_proj.weight",
                scale=0.5, seed=0, weights_version=1, detail="caches rebuilt on next use")
    length = {0: 0, 1: 0}
    for i, (r, step, tick, fed, pos, chosen, version, events, before, after) in enumerate(STEPS):
        begin = 0 if "cache_reset" in events else length[r]
        end = begin + len(fed)
        keys, values, ck, cv = [], [], [], []
        for l in range(3):
            k, v = records(l, begin, end, version)
            keys.append(k)
            values.append(v)
            k, v = records(l, 0, end, version)
            ck.append(k)
            cv.append(v)
        kw = {}
        if appended:
            kw.update(keys=keys, values=values)
        if snapshots:
            kw.update(cache_keys=ck, cache_values=cv)
        w.add_step(request=r, step=step, tick=tick, slot=r, fed_ids=fed, positions=pos, chosen=chosen,
                   logits=logits(i, chosen), weights_version=version, events=events,
                   rng_draws_before=before, rng_draws_after=after, **kw)
        length[r] = end
    return w


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--snapshots", action="store_true", help="appended records and full snapshots")
    ap.add_argument("--snapshots-only", action="store_true", help="full snapshots only (a full-snapshot trace)")
    ap.add_argument("--dtype", choices=kvtrace.STORE_DTYPES, default="F32")
    args = ap.parse_args(argv)
    build(snapshots=args.snapshots or args.snapshots_only, appended=not args.snapshots_only,
          dtype=args.dtype).save(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
