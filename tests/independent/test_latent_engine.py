"""The independent engine's DeepSeek V2 / V3 (torch_mla.py) against transformers 5.17's goldens
(tests/fixtures/families: multi-head latent attention, yarn, experts in groups): prompt logits
and the prefill's latent rows and roped key parts within 1e-4, the 16-token greedy decode
equal; the cached run equal to the uncached one; the absorbed decode (mla_absorbed) within 1e-4
of the materialised one and not bit for bit the same; what cannot apply is refused, saying why.
"""

from __future__ import annotations

import json
import os
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st_numpy  # noqa: E402
import torch_engine as te  # noqa: E402
from torch_mla import LatentModel, load_model  # noqa: E402

FAMILIES = os.path.join(os.path.dirname(HERE), "fixtures", "families")
LATENT = ("deepseek_v2", "deepseek_v3")
TOL = 1e-4
PROMPT = [5, 17, 300, 41, 99, 7, 250, 3]


def model_dir(name: str) -> str:
    return os.path.join(FAMILIES, "models", name)


class LatentGoldenTest(unittest.TestCase):
    def test_forward_and_greedy_match_transformers(self):
        for name in LATENT:
            g = st_numpy.load_file(os.path.join(FAMILIES, "golden", name + ".safetensors"))
            with open(os.path.join(FAMILIES, "golden", name + ".json"), encoding="utf-8") as f:
                prompts = json.load(f)["prompts"]
            model = load_model(model_dir(name))
            self.assertIsInstance(model, LatentModel)
            L = model.cfg.num_layers
            for i, p in enumerate(prompts):
                with self.subTest(model=name, prompt=i):
                    ids = p["ids"]
                    cache = te.KVCache(L)
                    logits = model.forward(ids, list(range(len(ids))), cache).numpy()
                    self.assertLess(np.abs(logits - g[f"p{i}.prompt_logits"]).max(), TOL)
                    ks, vs = cache.snapshot()
                    for l in range(L):  # latent rows [1, t, R] and roped key parts [1, t, rope]
                        self.assertEqual(ks[l].shape, g[f"p{i}.prefill.layer{l}.k"].shape)
                        self.assertLess(np.abs(ks[l] - g[f"p{i}.prefill.layer{l}.k"]).max(), TOL)
                        self.assertLess(np.abs(vs[l] - g[f"p{i}.prefill.layer{l}.v"]).max(), TOL)
                    run = te.DecodeEngine(model).run_cached(ids, 16)
                    self.assertEqual(run.requests[0]["generated"], p["greedy_manual"])
                    steps = np.stack([s.logits for s in run.steps])
                    self.assertLess(np.abs(steps - g[f"p{i}.greedy.step_logits"]).max(), TOL)

    def test_cached_uncached_and_absorbed_agree(self):
        for name in LATENT:
            with self.subTest(model=name):
                model = load_model(model_dir(name))
                cached = te.DecodeEngine(model).run_cached(PROMPT, 8)
                uncached = te.DecodeEngine(model).run_uncached(PROMPT, 8)
                absorbed = te.DecodeEngine(model, "mla_absorbed").run_cached(PROMPT, 8)
                self.assertEqual(cached.requests[0]["generated"], uncached.requests[0]["generated"])
                self.assertEqual(cached.requests[0]["generated"], absorbed.requests[0]["generated"])
                worst = max(np.abs(a.logits - c.logits).max() for a, c in zip(absorbed.steps, cached.steps))
                self.assertLess(worst, TOL)
                self.assertGreater(worst, 0.0, "the absorbed form computed bit for bit the materialised one")
                self.assertEqual(np.abs(absorbed.steps[0].logits - cached.steps[0].logits).max(), 0.0,
                                 "the prefill is materialised in both")
                halves = te.DecodeEngine(model, "mla_absorb:layer=1").run_cached(PROMPT, 8)
                self.assertEqual(np.abs(halves.steps[0].logits - cached.steps[0].logits).max(), 0.0)
                self.assertGreater(np.abs(halves.steps[1].logits - cached.steps[1].logits).max(), 1e-3)

    def test_a_cache_of_decompressed_heads_holds_what_the_latent_rows_decompress_to(self):
        """mla_heads (transformers 4.x's cache): each head's key [nh, t, nope + rope] and value
        [nh, t, v], the same logits as the latent cache up to rounding, and the trace's model
        block says so (latent_records "heads")."""
        for name in LATENT:
            with self.subTest(model=name):
                model = load_model(model_dir(name))
                latent = te.DecodeEngine(model).run_cached(PROMPT, 8)
                heads = te.DecodeEngine(model, "mla_heads").run_cached(PROMPT, 8)
                c = model.cfg
                self.assertEqual(heads.requests[0]["generated"], latent.requests[0]["generated"])
                worst = max(np.abs(h.logits - t.logits).max() for h, t in zip(heads.steps, latent.steps))
                self.assertLess(worst, TOL)
                last = heads.steps[-1]
                t = len(PROMPT) + 7
                self.assertEqual(np.asarray(last.cache_keys[0]).shape, (c.num_heads, t, c.nope + c.rope_dim))
                self.assertEqual(np.asarray(last.cache_values[0]).shape, (c.num_heads, t, c.v_dim))
                # Every head's roped part is the latent cache's one roped key part.
                pe = np.asarray(latent.steps[-1].cache_values[1])[0]
                for h in range(c.num_heads):
                    self.assertLess(np.abs(np.asarray(last.cache_keys[1])[h, :, c.nope:] - pe).max(), TOL)
                info = model.model_info()
                self.assertEqual((info["num_kv_heads"], info["head_dim"], info["value_head_dim"],
                                  info["latent_records"]), (c.num_heads, c.nope + c.rope_dim, c.v_dim, "heads"))
                te.DecodeEngine(model)  # another engine over the same model: latent rows again
                self.assertNotIn("latent_records", model.model_info())
                with self.assertRaisesRegex(ValueError, "mla_heads caches decompressed heads"):
                    te.DecodeEngine(model, "mla_heads+mla_absorbed")

    def test_what_cannot_apply_is_refused(self):
        llama = os.path.join(os.path.dirname(HERE), "fixtures", "hf", "models", "llama")
        with self.assertRaisesRegex(ValueError, "latent attention"):
            te.DecodeEngine(load_model(llama), "mla_absorb")
        v2 = load_model(model_dir("deepseek_v2"))
        with self.assertRaisesRegex(ValueError, "decode step"):
            te.DecodeEngine(v2, "mla_absorb:step=0")
        with self.assertRaisesRegex(ValueError, "without mla_absorbed"):
            te.DecodeEngine(v2, "mla_absorbed+mla_absorb")
        with self.assertRaisesRegex(ValueError, "Llama-family"):
            te.DecodeEngine(v2, "rope_scaling").run_cached(PROMPT, 2)


if __name__ == "__main__":
    unittest.main()
