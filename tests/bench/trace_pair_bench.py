#!/usr/bin/env python3
"""Benchmark (not a test): trace+trace audit time of a Llama-3.1-70B-shaped trace pair
(80 layers, 8 KV heads, head dim 128, vocab 128256, F16 storage), written with
kvscope_trace, at two run lengths. The audit must be linear in the run: 4x the steps
should cost about 4x the time (the issue's bound: at most 5x).

    /usr/bin/python3 tests/bench/trace_pair_bench.py [--cli build/app/cli/kvscope-cli]
        [--steps 65,257] [--layers 80] [--dir /tmp/kvscope-pair-bench]

The records are seeded random numbers (a benchmark of the audit's bookkeeping, not of a
model); the cached trace holds the reference's records plus float16-sized noise, so the
audit walks every step and finds nothing. Prints seconds, peak RSS and the ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.append(os.path.join(REPO, "python"))  # kvscope_trace: installed, else the source
import kvscope_trace as kvtrace  # noqa: E402


def write_pair(directory: str, steps: int, layers: int, heads: int = 8, dim: int = 128, vocab: int = 128256,
               prompt: int = 16) -> tuple:
    rng = np.random.default_rng(0)
    model = {"architecture": "llama", "num_layers": layers, "num_heads": 64, "num_kv_heads": heads, "head_dim": dim,
             "vocab_size": vocab, "max_positions": 131072, "stored_dtype": "BF16", "compute_dtype": "bfloat16"}
    ids = [int(t) for t in rng.integers(0, vocab, prompt + steps)]
    paths = []
    for mode in ("uncached", "cached"):
        w = kvtrace.TraceWriter(model, engine="pair-bench", mode=mode, dtype="F16")
        w.add_request(0, ids[:prompt], generated=ids[prompt:prompt + steps], max_new_tokens=steps,
                      stop_reason="max_new_tokens")
        rng_rec = np.random.default_rng(1)  # the same records in both files
        rng_noise = np.random.default_rng(2)
        for s in range(steps):
            n = prompt if s == 0 else 1
            keys = [rng_rec.standard_normal((heads, n, dim), dtype=np.float32) for _ in range(layers)]
            values = [rng_rec.standard_normal((heads, n, dim), dtype=np.float32) for _ in range(layers)]
            logits = rng_rec.standard_normal(vocab, dtype=np.float32) * 3
            if mode == "cached":
                keys = [k + 1e-4 * rng_noise.standard_normal(k.shape, dtype=np.float32) for k in keys]
            fed = ids[:prompt] if s == 0 else [ids[prompt + s - 1]]
            pos = list(range(prompt)) if s == 0 else [prompt + s - 1]
            logits = logits.copy()
            logits[ids[prompt + s]] = 50.0  # the recorded greedy choice
            w.add_step(0, s, fed, pos, chosen=ids[prompt + s], logits=logits, keys=keys, values=values)
        path = os.path.join(directory, f"{mode}.{steps}.kvtrace")
        w.save(path)
        paths.append(path)
    return tuple(paths)


def timed_audit(cli: str, reference: str, cached: str) -> tuple:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.run([cli, "audit", "--reference-trace", reference, "--trace", cached], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if p.returncode not in (0, 1):
        raise SystemExit(f"audit failed ({p.returncode}): {p.stderr}")
    return seconds, max(peak, before) / 1024.0, p.stdout.splitlines()[0] if p.stdout else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "app", "cli", "kvscope-cli"))
    ap.add_argument("--steps", default="65,257")
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--dir", default="/tmp/kvscope-pair-bench")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    results = []
    try:
        for steps in (int(x) for x in a.steps.split(",")):
            t0 = time.perf_counter()
            ref, cached = write_pair(a.dir, steps, a.layers)
            written = time.perf_counter() - t0
            seconds, rss, verdict = timed_audit(a.cli, ref, cached)
            size = os.path.getsize(ref) / 1e6
            results.append((steps, seconds))
            print(f"{steps:5d} steps: {size:7.1f} MB per trace (written in {written:.1f} s); audit {seconds:6.2f} s, "
                  f"peak RSS {rss:7.0f} MB; {verdict}")
    finally:
        shutil.rmtree(a.dir, ignore_errors=True)
    if len(results) == 2:
        (s1, t1), (s2, t2) = results
        print(f"time ratio {t2 / t1:.2f} for {s2 / s1:.2f}x the steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
