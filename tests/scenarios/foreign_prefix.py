"""The foreign-audit rows of prefix caching (issue 14), for independent_engine_audit_test.py's
IndependentEngineTest.test_prefix_reuse: the independent engine's prefix cache
(tests/independent/prefix_cache.py, blocks of 4) on gpt2 and llama, float32 and bfloat16.

- clean: request 1 differs from request 0 at token 11 (a hit of 8), request 2 at token 7 (a
  hit of 4); the audit finds nothing with the model and against the uncached run of each
  request (trace+trace);
- prefix_reuse (a block matched without its last token): request 1 differs from request 0
  only at the last token p of block 1 (p = 7) or block 2 (p = 11), is handed request 0's
  rows for all 3 whole blocks (12 entries) and must be prefix_reuse at request 1, step 0, the
  first layer whose reused rows are wrong (0 for every layer; L with a per-layer block table
  wrong at L) and the first wrong position p (the finding's where.position), the rows found
  to be request 0's (evidence.source_request).
"""

from __future__ import annotations

import os
from typing import Callable, List

import foreign_runs as fr
import prefix_cache

BLOCK = 4
LAYERS = {"gpt2": (0, 1), "llama": (1, 2)}  # the single layers the block table gets wrong


def differing_at(prompt: List[int], p: int) -> List[int]:
    """`prompt` with token p replaced by an id it does not hold there."""
    out = list(prompt)
    out[p] = next(t for t in (500, 501) if t != prompt[p])
    return out


def run_rows(case, check: Callable, prompts: dict, models: str, tmp: str, max_new: int = 4) -> None:
    """Records and audits every row; `check(case, source, run, mode, expect, outcome)`."""
    for model, prompt in prompts.items():
        ckpt = os.path.join(models, model)
        for dtype in ("float32", "bfloat16"):
            with case.subTest(model=model, dtype=dtype, run="prefix clean"):
                src = f"engine {model} {dtype}"
                path = lambda name: os.path.join(tmp, f"{model}.{dtype}.prefix-{name}.kvtrace")
                clean_prompts = [prompt, differing_at(prompt, 11), differing_at(prompt, 7)]
                info = prefix_cache.record_prefix(ckpt, path("clean"), clean_prompts, max_new, dtype=dtype,
                                                  spec=f"prefix_cache:block={BLOCK}")
                case.assertEqual({r: n for r, (n, _) in info["hits"].items()}, {1: 8, 2: 4})
                uncached = prefix_cache.record_uncached(ckpt, path("clean-uncached"), clean_prompts, max_new,
                                                        dtype=dtype)["out"]
                check(case, src, "prefix cache clean (hits of 8 and 4)", "model+trace", fr.Expectation([]),
                      fr.audit(info["out"], model=ckpt))
                check(case, src, "prefix cache clean vs uncached runs", "trace+trace", fr.Expectation([]),
                      fr.audit(info["out"], reference_trace=uncached))
            for p in (2 * BLOCK - 1, 3 * BLOCK - 1):
                pair = [prompt, differing_at(prompt, p)]
                uncached = None
                for layer in (-1,) + LAYERS[model]:
                    with case.subTest(model=model, dtype=dtype, differing=p, layer=layer):
                        name = f"reuse-{p}-{layer}"
                        info = prefix_cache.record_prefix(ckpt, path(name), pair, max_new, dtype=dtype,
                                                          spec=f"prefix_reuse:block={BLOCK},layer={layer}")
                        (acted,) = [i for i in info["injected"] if i["step"] is not None]
                        first_layer = max(layer, 0)
                        case.assertEqual((acted["request"], acted["position"], acted["layer"], acted["reused"]),
                                         (1, p, first_layer, 3 * BLOCK))
                        expect = fr.Expectation(["prefix_reuse"], 0, first_layer, first_request=1)
                        where = "every layer" if layer < 0 else f"L{layer}"
                        run = f"prefix_reuse: block ending at {p} matched, {where}"
                        runs = [("model+trace", fr.audit(info["out"], model=ckpt))]
                        if layer < 0:
                            uncached = uncached or prefix_cache.record_uncached(
                                ckpt, path(f"pair-{p}-uncached"), pair, max_new, dtype=dtype)["out"]
                            runs.append(("trace+trace", fr.audit(info["out"], reference_trace=uncached)))
                        for mode, out in runs:
                            check(case, src, run, mode, expect, out)
                            f = next(x for x in out.report["findings"] if x["id"] == "prefix_reuse")
                            case.assertEqual((f["where"]["request"], f["where"]["step"], f["where"]["layer"],
                                              f["where"]["position"]), (1, 0, first_layer, p), f"{run} ({mode})")
                            ev = f["evidence"]  # the rows are request 0's: the hit's source, found by the audit
                            case.assertEqual((ev["reused_count"], ev["reused_from"], ev["source_request"]), (12, 0, 0))
