#!/usr/bin/env python3
"""Tests for the recording side of kvscope_trace.hf_trace (numpy only; torch and transformers
are faked): cache adapters, sampling, decoding into a trace, main() and checksums.

    VENV/bin/python -m unittest discover -s python/tests -p test_hf_trace.py
"""

import contextlib
import io
import json
import os
import sys
import unittest

import numpy as np

from kvscope_trace import hf_trace
from kvscope_trace import trace as kvtrace
from test_trace import FIXTURES, TempDir, WithFakeXxhash, rand


class CacheAdapter(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(1)
        self.k = [rand(rng, 1, 2, 5, 4) for _ in range(2)]
        self.v = [rand(rng, 1, 2, 5, 4) for _ in range(2)]

    def check(self, layers):
        self.assertEqual(len(layers), 2)
        for (k, v), k0, v0 in zip(layers, self.k, self.v):
            self.assertIs(k, k0)
            self.assertIs(v, v0)

    def test_transformers5_layers(self):
        cache = FakeCacheV5(2)
        for l in range(2):
            cache.layers[l].keys, cache.layers[l].values = self.k[l], self.v[l]
        self.check(hf_trace.cache_layers(cache))
        self.assertEqual(hf_trace.cache_length(cache), 5)
        empty = FakeCacheV5(2)  # lazily initialised layers hold None
        self.assertEqual(hf_trace.cache_layers(empty), [(None, None), (None, None)])
        self.assertEqual(hf_trace.cache_length(empty), 0)

    def test_transformers4_key_cache(self):
        cache = FakeCacheV4()
        cache.key_cache, cache.value_cache = list(self.k), list(self.v)
        self.check(hf_trace.cache_layers(cache))
        cache.key_cache[1] = np.zeros((0,), np.float32)  # 4.4x placeholder for a skipped layer
        self.assertEqual(hf_trace.cache_layers(cache)[1], (None, None))

    def test_legacy_tuples_and_encoder_decoder(self):
        legacy = tuple((k, v) for k, v in zip(self.k, self.v))
        self.check(hf_trace.cache_layers(legacy))
        self.check(hf_trace.cache_layers([(k, v, "cross") for k, v in zip(self.k, self.v)]))

        class EncDec:
            self_attention_cache = legacy
            cross_attention_cache = ()
        self.check(hf_trace.cache_layers(EncDec()))
        self.assertEqual(hf_trace.cache_layers(None), [])
        with self.assertRaises(TypeError):
            hf_trace.cache_layers(object())
        with self.assertRaises(TypeError):
            hf_trace.cache_layers((self.k[0],))

    def test_cache_row_copies(self):
        row = hf_trace.cache_row(self.k[0])
        self.assertEqual(row.shape, (2, 5, 4))
        row[0, 0, 0] = 123
        self.assertNotEqual(self.k[0][0, 0, 0, 0], 123)


class Sampling(unittest.TestCase):
    def test_mt19937_64_matches_the_standard(self):
        g = hf_trace.MT19937_64()  # default seed 5489: the 10000th output is fixed by the standard
        for _ in range(9999):
            g.next()
        self.assertEqual(g.next(), 9981545732273789042)
        r = hf_trace.RequestRng(0)
        u = r.next_uniform()
        self.assertEqual(u, (hf_trace.MT19937_64(0).next() >> 11) * 2.0 ** -53)
        self.assertEqual(r.draws, 1)

    def test_greedy_ties_and_warpers(self):
        rng = hf_trace.RequestRng(0)
        row = np.array([1.0, 3.0, 3.0, 0.0], np.float32)
        greedy = kvtrace.normalize_policy(None)
        self.assertEqual(hf_trace.choose(row, greedy, rng), 1)
        self.assertEqual(hf_trace.choose(row, dict(greedy, tie_rule="highest"), rng), 2)
        self.assertEqual(rng.draws, 0)
        ties = np.array([2.0, 2.0, 2.0, 1.0], np.float32)
        p = hf_trace.warped_probabilities(ties, {"temperature": 1.0, "top_k": 1, "top_p": None})
        self.assertEqual(list(np.flatnonzero(p)), [0, 1, 2])  # top-k keeps the tie
        equal = np.zeros(3, np.float32)
        p = hf_trace.warped_probabilities(equal, {"temperature": 1.0, "top_k": None, "top_p": 0.5})
        self.assertEqual(list(np.flatnonzero(p)), [1, 2])  # the doc's example
        self.assertAlmostEqual(float(p.sum()), 1.0, places=12)

    def test_sampled_choice_uses_one_draw_and_inverse_cdf(self):
        policy = kvtrace.normalize_policy({"temperature": 0.7, "top_k": 3, "seed": 5})
        row = np.array([0.1, 2.0, 1.5, -1.0, 1.9], np.float32)
        rng = hf_trace.RequestRng(5)
        token = hf_trace.choose(row, policy, rng)
        self.assertEqual(rng.draws, 1)
        u = hf_trace.RequestRng(5).next_uniform()
        p = hf_trace.warped_probabilities(row, policy)
        self.assertEqual(list(np.flatnonzero(p)), [1, 2, 4])
        cum = np.cumsum(p[[1, 2, 4]])
        self.assertEqual(token, [1, 2, 4][int(np.argmax(u * cum[-1] < cum))])


# ----------------------------------------------------------------------------- fake model


class FakeLayer:
    def __init__(self):
        self.keys = self.values = None


class FakeCacheV5:
    """transformers 5: cache.layers[i].keys / .values, [B, h, t, d], None until first use."""

    def __init__(self, n):
        self.layers = [FakeLayer() for _ in range(n)]

    def update(self, l, k, v):
        layer = self.layers[l]
        layer.keys = k if layer.keys is None else np.concatenate([layer.keys, k], axis=2)
        layer.values = v if layer.values is None else np.concatenate([layer.values, v], axis=2)
        return layer.keys, layer.values


class FakeCacheV4:
    """transformers 4: cache.key_cache[i] / value_cache[i]."""

    def __init__(self, n=0):
        self.key_cache, self.value_cache = [], []

    def update(self, l, k, v):
        if len(self.key_cache) <= l:
            self.key_cache.append(k)
            self.value_cache.append(v)
        else:
            self.key_cache[l] = np.concatenate([self.key_cache[l], k], axis=2)
            self.value_cache[l] = np.concatenate([self.value_cache[l], v], axis=2)
        return self.key_cache[l], self.value_cache[l]


class FakeLM:
    """A 2-layer attention-only LM with random projections and rotary-free additive
    positions; K/V per layer go through a cache object like transformers' update()."""

    def __init__(self, V=40, D=16, H=2, d=4, L=2, P=32, seed=0):
        rng = np.random.default_rng(seed)
        self.V, self.H, self.d, self.L, self.P = V, H, d, L, P
        self.E = rand(rng, V, D) * 0.5
        self.pos = rand(rng, P, D) * 0.5
        self.W = [{n: rand(rng, D, H * d) / np.sqrt(D) for n in ("q", "k", "v")} for _ in range(L)]
        self.O = [rand(rng, H * d, D) / np.sqrt(H * d) for _ in range(L)]

    def info(self):
        return {"architecture": "fake", "num_layers": self.L, "num_heads": self.H,
                "num_kv_heads": self.H, "head_dim": self.d, "vocab_size": self.V, "max_positions": self.P}

    def forward(self, style):
        def run(ids, positions, cache):
            x = self.E[ids] + self.pos[positions]  # [n, D]
            n = len(ids)
            legacy = style == "tuple"
            if cache is None or legacy:
                store = FakeCacheV5(self.L) if style in ("v5", "tuple") else FakeCacheV4()
                if legacy and cache is not None:
                    for l, (k, v) in enumerate(cache):
                        store.update(l, k, v)
            else:
                store = cache
            for l in range(self.L):
                def heads(name):
                    return (x @ self.W[l][name]).reshape(n, self.H, self.d).transpose(1, 0, 2)[None]
                K, Vv = store.update(l, heads("k"), heads("v"))  # [1, H, t, d]
                q = heads("q")[0]
                t = K.shape[2]
                scores = q @ K[0].transpose(0, 2, 1) / np.sqrt(self.d)  # [H, n, t]
                allowed = np.arange(t)[None, :] <= (t - n + np.arange(n))[:, None]
                scores = np.where(allowed[None], scores, -np.inf)
                w = np.exp(scores - scores.max(-1, keepdims=True))
                w /= w.sum(-1, keepdims=True)
                att = (w @ Vv[0]).transpose(1, 0, 2).reshape(n, self.H * self.d)
                x = x + att @ self.O[l]
            logits = x[-1] @ self.E.T
            out = tuple((layer.keys, layer.values) for layer in store.layers) if legacy else store
            return logits.astype(np.float32), out
        return run


class FakeDecode(TempDir, unittest.TestCase):
    def record(self, style="v5", snapshots=False, uncached=False, policy=None, max_new=6, prompts=None):
        lm = FakeLM()
        rec = hf_trace.TraceRecorder(lm.info(), engine="fake", mode="uncached" if uncached else "cached",
                                     snapshots=snapshots)
        outs = []
        for rid, prompt in enumerate(prompts or [[3, 14, 15, 9], [2, 7]]):
            outs.append(hf_trace.decode(lm.forward(style), rec, rid, prompt, max_new, policy,
                                        eos_ids=[1], stop_at_eos=False, max_positions=lm.P,
                                        uncached=uncached))
        path = self.path(f"{style}-{snapshots}-{uncached}.kvtrace")
        rec.save(path)
        return kvtrace.read_trace(path), outs, lm

    def assert_consistent(self, t, snapshots):
        for r in t.requests:
            steps = t.steps_of(r["id"])
            self.assertEqual(steps[0].fed_ids, r["prompt_ids"])
            self.assertEqual(steps[0].events, ["arrival"])
            stream = r["prompt_ids"] + r["generated"]
            fed = [x for s in steps for x in s.fed_ids]
            self.assertEqual(fed, stream[:len(fed)])
            self.assertEqual([p for s in steps for p in s.positions], list(range(len(fed))))
            self.assertEqual([s.chosen for s in steps], r["generated"])
            for l in range(t.model["num_layers"]):
                keys = np.concatenate([s.layers[l].keys for s in steps], axis=1)
                values = np.concatenate([s.layers[l].values for s in steps], axis=1)
                self.assertEqual(keys.shape, (2, len(fed), 4))
                self.assertEqual([s.layers[l].cache_length for s in steps],
                                 list(np.cumsum([len(s.fed_ids) for s in steps])))
                if snapshots:
                    np.testing.assert_array_equal(steps[-1].layers[l].cache_keys, keys)
                    np.testing.assert_array_equal(steps[-1].layers[l].cache_values, values)
                    for s in steps:
                        self.assertEqual(s.layers[l].cache_keys.shape[1], s.layers[l].cache_length)

    def test_cached_decode_records_consistent_appends(self):
        for style in ("v5", "v4", "tuple"):
            with self.subTest(style=style):
                t, outs, lm = self.record(style)
                self.assertEqual(t.mode, "cached")
                self.assertFalse(t.has_snapshots())
                self.assert_consistent(t, snapshots=False)
                self.assertEqual([r["stop_reason"] for r in t.requests], ["max_new_tokens"] * 2)
                self.assertEqual([s.tick for s in t.steps], list(range(len(t.steps))))
                self.assertEqual([s.slot for s in t.steps], [s.request for s in t.steps])

    def test_snapshots_match_appends_and_derive_back(self):
        t, outs, lm = self.record("v5", snapshots=True)
        self.assertTrue(t.has_snapshots())
        self.assert_consistent(t, snapshots=True)

    def test_records_match_a_direct_forward(self):
        t, outs, lm = self.record("v5")
        r = t.requests[0]
        stream = r["prompt_ids"] + r["generated"][:-1]
        logits, cache = lm.forward("v5")(stream, list(range(len(stream))), None)
        for l in range(2):
            keys = np.concatenate([s.layers[l].keys for s in t.steps_of(0)], axis=1)
            np.testing.assert_allclose(keys, cache.layers[l].keys[0], atol=1e-5)
        np.testing.assert_allclose(t.steps_of(0)[-1].logits, logits, atol=1e-4)

    def test_uncached_mode_agrees_with_cached(self):
        cached, outs_c, _ = self.record("v5")
        uncached, outs_u, _ = self.record("v5", uncached=True)
        self.assertEqual(uncached.mode, "uncached")
        self.assertEqual(outs_c, outs_u)
        for a, b in zip(cached.steps, uncached.steps):
            self.assertEqual(a.fed_ids, b.fed_ids)
            self.assertEqual(a.positions, b.positions)
            np.testing.assert_allclose(a.logits, b.logits, atol=1e-4)
            for la, lb in zip(a.layers, b.layers):
                self.assertEqual(la.cache_length, lb.cache_length)
                np.testing.assert_allclose(la.keys, lb.keys, atol=1e-5)
                np.testing.assert_allclose(la.values, lb.values, atol=1e-5)

    def test_sampled_decode_counts_draws(self):
        policy = {"temperature": 1.3, "top_p": 0.95, "seed": 3}
        t, outs, lm = self.record("v4", policy=policy)
        steps = t.steps_of(1)
        self.assertEqual([s.rng_draws_before for s in steps], list(range(len(steps))))
        self.assertEqual([s.rng_draws_after for s in steps], list(range(1, len(steps) + 1)))
        self.assertEqual(t.requests[1]["policy"]["seed"], 3)
        # replaying the recorded logits with the policy reproduces every token
        rng = hf_trace.RequestRng(3)
        norm = kvtrace.normalize_policy(policy)
        self.assertEqual([hf_trace.choose(s.logits, norm, rng) for s in steps], t.requests[1]["generated"])

    def test_eos_and_context_limit(self):
        lm = FakeLM(P=8)
        rec = hf_trace.TraceRecorder(lm.info(), engine="fake")
        out = hf_trace.decode(lm.forward("v5"), rec, 0, [3, 4, 5, 6, 7], 10, None, max_positions=8)
        self.assertEqual(len(out), 4)  # tokens 2-4 are fed at 5, 6, 7; the 4th would need 8
        self.assertEqual(rec.writer.requests[0]["stop_reason"], "context_limit")
        self.assertEqual(rec.writer.steps[-1].events, ["context_limit"])
        first = out[0]
        rec = hf_trace.TraceRecorder(lm.info(), engine="fake")
        out = hf_trace.decode(lm.forward("v5"), rec, 0, [3, 4, 5, 6, 7], 10, None, eos_ids=[first])
        self.assertEqual(out, [first])
        self.assertEqual(rec.writer.requests[0]["stop_reason"], "eos")
        self.assertEqual(rec.writer.steps[-1].events, ["arrival", "eos"])

    def test_shrunk_cache_is_recorded_as_reset(self):
        lm = FakeLM()
        rec = hf_trace.TraceRecorder(lm.info(), engine="fake")
        rec.begin_request(0, [3, 4, 5])
        fwd = lm.forward("v5")
        logits, cache = fwd([3, 4, 5], [0, 1, 2], None)
        rec.record_step(0, 0, [3, 4, 5], [0, 1, 2], logits, 0, cache=cache)
        logits, cache = fwd([3, 4], [0, 1], None)  # the engine rebuilt a shorter cache
        st = rec.record_step(0, 1, [3, 4], [0, 1], logits, 0, cache=cache)
        self.assertEqual(st.events, ["cache_reset"])
        self.assertEqual(st.layers[0].keys.shape, (2, 2, 4))


def fake_transformers(lm, calls):
    """Stand-ins for the torch and transformers modules hf_trace.main() imports, driving
    FakeLM with a transformers-5-style cache; `calls` collects the forward kwargs."""
    import types
    torch = types.ModuleType("torch")
    torch.__version__ = "fake"
    torch.float32, torch.long = "torch.float32", "long"
    torch.tensor = lambda data, device=None: np.array(data)
    torch.ones = lambda shape, dtype=None, device=None: np.ones(shape, np.int64)
    torch.arange = lambda a, b, device=None: np.arange(a, b)
    torch.no_grad = contextlib.nullcontext
    torch.manual_seed = lambda s: None
    tf = types.ModuleType("transformers")
    tf.__version__ = "5.0.0"
    run = lm.forward("v5")

    class Model:
        config = types.SimpleNamespace(model_type="fake", num_hidden_layers=lm.L, num_attention_heads=lm.H,
                                       num_key_value_heads=lm.H, head_dim=lm.d, vocab_size=lm.V,
                                       max_position_embeddings=lm.P)
        generation_config = types.SimpleNamespace(eos_token_id=[1])

        def to(self, device):
            return self

        def eval(self):
            return self

        def get_output_embeddings(self):
            return types.SimpleNamespace(weight=lm.E)

        def __call__(self, **kw):
            return self.forward(**kw)

        def forward(self, input_ids=None, position_ids=None, attention_mask=None, past_key_values=None,
                    use_cache=None, cache_position=None):
            calls.append(dict(ids=input_ids.tolist(), positions=position_ids.tolist(),
                              mask=attention_mask.shape, cache_position=cache_position.tolist(),
                              fresh=past_key_values is None))
            logits, cache = run(list(input_ids[0]), list(position_ids[0]), past_key_values)
            return types.SimpleNamespace(logits=np.tile(logits, (1, len(input_ids[0]), 1)),
                                         past_key_values=cache)

    class Auto:
        @staticmethod
        def from_pretrained(path, **kw):
            calls.append({"load": kw})
            return Model()

    class Tokenizer:
        @staticmethod
        def from_pretrained(path):
            return lambda text: {"input_ids": [3 + len(w) for w in text.split()]}
    tf.AutoModelForCausalLM, tf.AutoTokenizer = Auto, Tokenizer
    return {"torch": torch, "transformers": tf}


class HfMain(TempDir, unittest.TestCase):
    def run_main(self, *extra):
        from unittest import mock
        lm, calls = FakeLM(), []
        out = self.path("hf.kvtrace")
        llama = os.path.join(FIXTURES, "hf", "models", "llama")
        model_dir = llama if os.path.isdir(llama) else self.dir
        argv = ["--model", model_dir, "--prompt", "a bb ccc", "--prompt-ids", "2,7", "--max-new", "4",
                "--ignore-eos", "--no-fingerprint", "--out", out] + list(extra)
        with mock.patch.dict(sys.modules, fake_transformers(lm, calls)), \
                contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(hf_trace.main(argv), 0)
        return kvtrace.read_trace(out), calls, lm

    def test_cached_run(self):
        t, calls, lm = self.run_main("--snapshots", "--temperature", "0.9", "--seed", "4")
        self.assertEqual(calls[0], {"load": {"dtype": "torch.float32"}})
        fwd = calls[1:]
        self.assertEqual(fwd[0], {"ids": [[4, 5, 6]], "positions": [[0, 1, 2]], "mask": (1, 3),
                                  "cache_position": [0, 1, 2], "fresh": True})
        self.assertEqual(fwd[1]["positions"], [[3]])
        self.assertEqual(fwd[1]["mask"], (1, 4))
        self.assertEqual(fwd[1]["cache_position"], [3])
        self.assertFalse(fwd[1]["fresh"])
        self.assertEqual(t.mode, "cached")
        self.assertIn("kvscope-record", t.engine)
        self.assertEqual([r["prompt_ids"] for r in t.requests], [[4, 5, 6], [2, 7]])
        self.assertEqual(t.requests[0]["prompt_text"], "a bb ccc")
        self.assertEqual(t.requests[0]["eos_ids"], [1])
        self.assertEqual(t.requests[1]["policy"]["temperature"], 0.9)
        self.assertEqual(t.model["num_layers"], 2)
        self.assertTrue(t.has_snapshots())
        self.assertEqual(len(t.steps), 8)
        FakeDecode.assert_consistent(self, t, snapshots=True)

    def test_uncached_run(self):
        t, calls, lm = self.run_main("--uncached")
        fwd = calls[1:]
        self.assertTrue(all(c["fresh"] for c in fwd))
        self.assertEqual(fwd[1]["ids"], [[4, 5, 6, t.requests[0]["generated"][0]]])
        self.assertEqual(t.mode, "uncached")
        self.assertEqual(t.steps[1].fed_ids, [t.requests[0]["generated"][0]])
        self.assertEqual(t.steps[1].layers[0].cache_length, 4)
        self.assertEqual(t.steps[1].layers[0].keys.shape, (2, 1, 4))


class RecorderChecksums(WithFakeXxhash, unittest.TestCase):
    def test_recorder_writes_checksums_of_the_whole_cache(self):
        lm = FakeLM()
        rec = hf_trace.TraceRecorder(lm.info(), engine="fake")
        hf_trace.decode(lm.forward("v5"), rec, 0, [3, 4, 5], 3, None)
        path = self.path("sums.kvtrace")
        rec.save(path)
        t = kvtrace.read_trace(path)
        steps = t.steps_of(0)
        for l in range(2):
            keys = np.concatenate([s.layers[l].keys for s in steps], axis=1)
            self.assertEqual(steps[-1].layers[l].checksum_k, kvtrace.cache_checksum(keys))
            self.assertEqual(len(steps[0].layers[l].checksum_v), 16)


    def test_uncached_mode_records_none(self):
        lm = FakeLM()
        rec = hf_trace.TraceRecorder(lm.info(), engine="fake", mode="uncached")
        hf_trace.decode(lm.forward("v5"), rec, 0, [3, 4, 5], 2, None, uncached=True)
        self.assertTrue(all(l.checksum_k is None for s in rec.writer.steps for l in s.layers))



class ModelInfo(unittest.TestCase):
    def test_model_block_from_a_transformers_config(self):
        llama = os.path.join(FIXTURES, "hf", "models", "llama")
        if not os.path.isdir(llama):
            self.skipTest("llama fixture not found")
        import types
        with open(os.path.join(llama, "config.json")) as f:
            config = types.SimpleNamespace(**json.load(f))
        info = hf_trace.model_info(config, llama, 1200, "float32")
        self.assertEqual({k: info[k] for k in ("architecture", "num_layers", "num_heads", "num_kv_heads",
                                                "head_dim", "vocab_size", "max_positions", "stored_dtype")},
                         {"architecture": "llama", "num_layers": 3, "num_heads": 4, "num_kv_heads": 2,
                          "head_dim": 16, "vocab_size": 1200, "max_positions": 128, "stored_dtype": "F32"})
        self.assertEqual(len(info["fingerprint"]), 64)
        gpt2 = types.SimpleNamespace(model_type="gpt2", n_layer=2, n_head=4, n_embd=32, n_positions=64)
        info = hf_trace.model_info(gpt2, llama, 100, "float32", fingerprint=False)
        self.assertEqual((info["num_layers"], info["num_kv_heads"], info["head_dim"], info["max_positions"]),
                         (2, 4, 8, 64))


if __name__ == "__main__":
    unittest.main()
