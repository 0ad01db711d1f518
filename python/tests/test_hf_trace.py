#!/usr/bin/env python3
"""Tests for the recording side of kvscope_trace.hf_trace (numpy only; torch and transformers
are faked): cache adapters, sampling, decoding into a trace, main() and checksums. LiveQwen3_5
runs the real library (skipped without torch and transformers 5): Qwen3.5's recurrent states
as kvscope-record and recording() record them.

    VENV/bin/python -m unittest discover -s python/tests -p test_hf_trace.py
"""

import contextlib
import io
import json
import os
import sys
import unittest

import numpy as np

from kvscope_trace import cli, hf_trace
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

    def test_chunked_prefill_feeds_the_prompt_a_chunk_at_a_time(self):
        lm, prompt = FakeLM(), [3, 14, 15, 9, 2, 6, 5]
        runs = {}
        for chunk in (0, 3):
            rec = hf_trace.TraceRecorder(lm.info(), engine="fake")
            out = hf_trace.decode(lm.forward("v5"), rec, 0, prompt, 4, None, prefill_chunk=chunk)
            path = self.path(f"chunk{chunk}.kvtrace")
            rec.save(path)
            runs[chunk] = (out, kvtrace.read_trace(path))
        (whole, t), (chunked, c) = runs[0], runs[3]
        self.assertEqual(chunked, whole)
        self.assertEqual([s.fed_ids for s in c.steps[:3]], [prompt[:3], prompt[3:6], prompt[6:]])
        self.assertEqual([s.chosen for s in c.steps[:2]], [-1, -1])
        self.assertEqual([s.events for s in c.steps[:3]], [["arrival"], [], []])
        self.assertIsNone(c.steps[0].logits)
        self.assertEqual(len(c.steps), len(t.steps) + 2)
        for layer in range(lm.L):  # the chunks' records are the whole prefill's
            rows = np.concatenate([s.layers[layer].keys for s in c.steps[:3]], axis=1)
            np.testing.assert_allclose(rows, t.steps[0].layers[layer].keys, atol=1e-5)
        with self.assertRaises(ValueError):  # the reference feeds the whole prefix
            hf_trace.decode(lm.forward("v5"), hf_trace.TraceRecorder(lm.info(), engine="fake", mode="uncached"),
                            0, prompt, 2, None, uncached=True, prefill_chunk=3)

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



class FakeTensor(np.ndarray):
    """A numpy array with the torch methods watch_updates and to_numpy call."""

    def detach(self):
        return self

    def clone(self):
        return self.copy()

    def cpu(self):
        return self

    def numpy(self):
        return np.asarray(self)


class FakeRecurrentLayer:
    """transformers 5's LinearAttentionLayer (a Gated DeltaNet layer's cache): conv_states /
    recurrent_states, no keys."""

    def __init__(self):
        self.conv_states, self.recurrent_states = {0: None}, {0: None}


class FakeHybridCache:
    """A transformers 5 DynamicCache of Qwen3.5's kind: attention layers and recurrent ones;
    update() in transformers' argument order (watch_updates wraps it); get_seq_length counts
    an attention layer and refuses a recurrent one other than layer 0, as transformers does."""

    def __init__(self, kinds):
        self.layers = [FakeRecurrentLayer() if k == "recurrent" else FakeLayer() for k in kinds]

    def update(self, key_states, value_states, layer_idx):
        return FakeCacheV5.update(self, layer_idx, key_states, value_states)

    def get_seq_length(self, layer_idx=0):
        if isinstance(self.layers[layer_idx], FakeRecurrentLayer):
            if layer_idx:
                raise ValueError("a recurrent layer has no sequence length")
            layer_idx = next(i for i, l in enumerate(self.layers) if not isinstance(l, FakeRecurrentLayer))
        k = self.layers[layer_idx].keys
        return 0 if k is None else k.shape[2]


class FakeHybridLM(FakeLM):
    """FakeLM whose layer 1 is recurrent: a decaying sum of its inputs' projections (kept in
    the cache's recurrent_states [1, 2, 4, 2], updated in place as transformers does), and the
    layer's last 3 inputs (conv_states [1, 16, 3], zeros before the first), no K/V."""
    KINDS = ("full", "recurrent", "full")

    def __init__(self):
        super().__init__(L=3)

    def forward(self, watched=True):
        def run(ids, positions, cache):
            if cache is None:
                cache = FakeHybridCache(self.KINDS)
                if watched:
                    hf_trace.watch_updates(cache)
            hf_trace.begin_forward(cache)
            self.consumed.append(hf_trace.consumed_length(cache))
            x = self.E[ids] + self.pos[positions]
            n = len(ids)
            for l in range(self.L):
                if self.KINDS[l] == "recurrent":
                    layer = cache.layers[l]
                    if layer.recurrent_states[0] is None:
                        layer.recurrent_states[0] = np.zeros((1, 2, 4, 2), np.float32).view(FakeTensor)
                        layer.conv_states[0] = np.zeros((1, x.shape[1], 3), np.float32).view(FakeTensor)
                    state = np.array(layer.recurrent_states[0][0]).reshape(-1)
                    out = []
                    for row in x @ self.W[l]["v"] @ self.O[l]:
                        state = 0.5 * state + row
                        out.append(state)
                    layer.recurrent_states[0][0] = state.reshape(2, 4, 2)  # in place
                    conv = np.concatenate([np.asarray(layer.conv_states[0][0]), x.T], axis=1)
                    layer.conv_states[0][0] = conv[:, -3:]
                    x = x + np.tanh(np.array(out))
                    continue

                def heads(name):
                    return (x @ self.W[l][name]).reshape(n, self.H, self.d).transpose(1, 0, 2)[None]
                K, Vv = cache.update(heads("k").view(FakeTensor), heads("v").view(FakeTensor), l)
                K, Vv = np.asarray(K), np.asarray(Vv)
                q = heads("q")[0]
                t = K.shape[2]
                scores = q @ K[0].transpose(0, 2, 1) / np.sqrt(self.d)
                allowed = np.arange(t)[None, :] <= (t - n + np.arange(n))[:, None]
                w = np.exp(np.where(allowed[None], scores, -np.inf) - scores.max(-1, keepdims=True))
                w /= w.sum(-1, keepdims=True)
                x = x + (w @ Vv[0]).transpose(1, 0, 2).reshape(n, self.H * self.d) @ self.O[l]
            return (x[-1] @ self.E.T).astype(np.float32), cache
        self.consumed = []
        return run


class RecurrentLayers(TempDir, unittest.TestCase):
    """Qwen3.5's Gated DeltaNet layers: a recurrent state in the cache, recorded as
    layer_kinds "recurrent" with no K/V records (0 appended, cache length 0)."""

    def test_the_adapter_sees_no_rows_on_a_recurrent_layer(self):
        cache = FakeHybridCache(("recurrent", "full", "recurrent", "full"))
        rng = np.random.default_rng(3)
        for l in (1, 3):
            cache.update(rand(rng, 1, 2, 5, 4), rand(rng, 1, 2, 5, 4), l)
        layers = hf_trace.cache_layers(cache)
        self.assertEqual([k is None for k, _ in layers], [True, False, True, False])
        self.assertEqual(hf_trace.recurrent_layers(cache), [0, 2])
        self.assertEqual(hf_trace.layer_kinds(cache), [{"kind": "recurrent"}, {"kind": "full"}] * 2)
        self.assertEqual((hf_trace.cache_length(cache), hf_trace.consumed_length(cache)), (5, 5))
        self.assertIsNone(hf_trace.layer_kinds(FakeCacheV5(2)))  # no sliding, no recurrent layer
        v4 = FakeCacheV4()  # transformers 4's Qwen3-Next cache: key_cache lists and layer_types
        v4.key_cache, v4.value_cache = [None, cache.layers[1].keys], [None, cache.layers[1].values]
        v4.layer_types = ["linear_attention", "full_attention"]
        self.assertEqual(hf_trace.recurrent_layers(v4), [0])
        self.assertEqual(hf_trace.layer_kinds(v4), [{"kind": "recurrent"}, {"kind": "full"}])

    def record(self, uncached=False, watched=True, snapshots=False):
        lm = FakeHybridLM()
        rec = hf_trace.TraceRecorder(lm.info(), engine="fake", mode="uncached" if uncached else "cached",
                                     snapshots=snapshots)
        fwd = lm.forward(watched)
        out = hf_trace.decode(fwd, rec, 0, [3, 14, 15, 9], 5, None, stop_at_eos=False, uncached=uncached)
        path = self.path(f"hybrid-{uncached}-{watched}-{snapshots}.kvtrace")
        rec.save(path)
        return kvtrace.read_trace(path), out, lm

    def test_decode_records_no_rows_on_the_recurrent_layer(self):
        runs = {"cached": self.record(), "unwatched": self.record(watched=False),
                "snapshots": self.record(snapshots=True), "uncached": self.record(uncached=True)}
        ref = runs["cached"][0]
        self.assertEqual(runs["cached"][2].consumed, [0, 4, 5, 6, 7])  # layer 0's length
        for name, (t, out, lm) in runs.items():
            with self.subTest(name):
                self.assertEqual(out, runs["cached"][1])
                self.assertEqual(t.extra["layer_kinds"], [{"kind": "full"}, {"kind": "recurrent"}, {"kind": "full"}])
                for s, r in zip(t.steps, ref.steps):
                    np.testing.assert_allclose(s.logits, r.logits, atol=1e-5)
                    self.assertEqual((s.layers[1].keys.shape, s.layers[1].cache_length), ((2, 0, 4), 0))
                    for l in (0, 2):
                        self.assertEqual(s.layers[l].keys.shape, (2, len(s.fed_ids), 4))
                        np.testing.assert_allclose(s.layers[l].keys, r.layers[l].keys, atol=1e-5)
                self.assertEqual([s.layers[2].cache_length for s in t.steps], [4, 5, 6, 7, 8])
        self.assertNotIn("layer1.k", kvtrace._Container(self.path("hybrid-False-True-True.kvtrace")))

    def test_states_after_the_steps(self):
        """The recurrent layer's state after each step (state_every 1, 2, 3; 0: none; none
        uncached): what a fresh run over the stream so far leaves in the cache; copies, though
        the fake updates its states in place as transformers does."""
        prompt, new = [3, 14, 15, 9], 5
        for every, rows in ((1, [0, 1, 2, 3, 4]), (2, [0, -1, 1, -1, 2]), (3, [0, -1, -1, 1, -1]), (0, None)):
            with self.subTest(state_every=every):
                lm = FakeHybridLM()
                rec = hf_trace.TraceRecorder(lm.info(), engine="fake", state_every=every)
                out = hf_trace.decode(lm.forward(), rec, 0, prompt, new, None, stop_at_eos=False)
                path = self.path(f"states-{every}.kvtrace")
                rec.save(path)
                doc = json.loads(kvtrace._Container(path).metadata["kvtrace"])
                self.assertEqual(doc["steps"].get("state_row"), rows)
                t = kvtrace.read_trace(path)
                stream = prompt + out
                for s in t.steps:
                    self.assertIsNone(s.layers[0].conv_state)
                    if rows is None or rows[s.step] < 0:
                        self.assertIsNone(s.layers[1].conv_state)
                        continue
                    n = len(prompt) + s.step
                    _, fresh = lm.forward()(stream[:n], list(range(n)), None)
                    self.assertEqual((s.layers[1].conv_state.shape, s.layers[1].recurrent_state.shape),
                                     ((16, 3), (2, 4, 2)))
                    np.testing.assert_allclose(s.layers[1].conv_state, fresh.layers[1].conv_states[0][0], atol=1e-5)
                    np.testing.assert_allclose(s.layers[1].recurrent_state, fresh.layers[1].recurrent_states[0][0],
                                               atol=1e-5)
        t, _, _ = self.record(uncached=True)
        self.assertTrue(all(l.conv_state is None for s in t.steps for l in s.layers))
        with self.assertRaises(ValueError):
            hf_trace.TraceRecorder(FakeHybridLM().info(), state_every=-1)


def _transformers5():
    """torch and transformers 5 (Qwen3.5) importable, and the qwen3_5_text fixture there."""
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError:
        return False
    return int(transformers.__version__.split(".")[0]) >= 5 and \
        os.path.isdir(os.path.join(FIXTURES, "families", "models", "qwen3_5_text"))


@unittest.skipUnless(_transformers5(), "needs torch, transformers 5 and the qwen3_5_text fixture")
class LiveQwen3_5(TempDir, unittest.TestCase):
    """The real library: Qwen3.5's Gated DeltaNet states as kvscope-record and recording()
    record them, against transformers' own cache (tests/fixtures/families/models/qwen3_5_text:
    layers linear, full, linear, full; conv_dim 64, kernel 4, 4 value heads, Dk = Dv = 8)."""
    MODEL = os.path.join(FIXTURES, "families", "models", "qwen3_5_text")
    PROMPT = [5, 17, 300, 42, 9, 77, 3]

    @classmethod
    def setUpClass(cls):
        import torch
        from transformers import AutoModelForCausalLM
        cls.torch = torch
        cls.model = AutoModelForCausalLM.from_pretrained(cls.MODEL, dtype=torch.float32).eval()

    def cache_states(self, ids, model=None):
        """transformers' own states after model(ids): {layer: (conv [64, 4], recurrent [4, 8, 8])}."""
        from transformers import DynamicCache
        model = model or self.model
        cache = DynamicCache(config=model.config)
        with self.torch.no_grad():
            model(self.torch.tensor([ids]), past_key_values=cache, use_cache=True)
        return {l: (cache.layers[l].conv_states[0][0].float().numpy().copy(),
                    cache.layers[l].recurrent_states[0][0].numpy().copy()) for l in (0, 2)}

    def record(self, *extra):
        out = self.path("q.kvtrace")
        argv = ["--model", self.MODEL, "--prompt-ids", ",".join(map(str, self.PROMPT)), "--max-new", "8",
                "--ignore-eos", "--no-fingerprint", "--out", out] + list(extra)
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(hf_trace.main(argv), 0)
        return kvtrace.read_trace(out), out

    def test_kvscope_record_records_the_state_after_every_step(self):
        t, path = self.record()
        f = kvtrace._Container(path)
        self.assertEqual(json.loads(f.metadata["kvtrace"])["steps"]["state_row"], list(range(8)))
        self.assertEqual(t.extra["layer_kinds"], [{"kind": "recurrent"}, {"kind": "full"}] * 2)
        for l in (0, 2):
            self.assertEqual((f.dtype(f"layer{l}.conv_state"), list(f.shape(f"layer{l}.conv_state"))),
                             ("F32", [8, 64, 4]))
            self.assertEqual(list(f.shape(f"layer{l}.recurrent_state")), [8, 4, 8, 8])
        self.assertNotIn("layer1.conv_state", f)
        generated = t.requests[0]["generated"]
        first = self.cache_states(self.PROMPT)  # the state after the prefill: transformers' cache's
        last = self.cache_states(self.PROMPT + generated[:-1])  # a full forward over the stream
        for l in (0, 2):
            np.testing.assert_allclose(t.steps[0].layers[l].conv_state, first[l][0], rtol=0, atol=1e-6)
            np.testing.assert_allclose(t.steps[0].layers[l].recurrent_state, first[l][1], rtol=0, atol=1e-6)
            # the conv holds the last 4 inputs, the recurrent state moved at every step
            np.testing.assert_allclose(t.steps[-1].layers[l].conv_state, last[l][0], rtol=0, atol=1e-4)
            np.testing.assert_allclose(t.steps[-1].layers[l].recurrent_state, last[l][1], rtol=0, atol=1e-4)
            for a, b in zip(t.steps, t.steps[1:]):
                self.assertGreater(np.abs(a.layers[l].recurrent_state - b.layers[l].recurrent_state).max(), 1e-3)
                np.testing.assert_array_equal(a.layers[l].conv_state[:, 1:], b.layers[l].conv_state[:, :-1])
        self.assertIn("recurrent states at 8 steps", cli.info(t, path))

    def test_state_every_uncached_and_bfloat16(self):
        t, path = self.record("--state-every", "3")
        self.assertEqual(json.loads(kvtrace._Container(path).metadata["kvtrace"])["steps"]["state_row"],
                         [0, -1, -1, 1, -1, -1, 2, -1])
        t, path = self.record("--state-every", "0")
        self.assertNotIn("state_row", json.loads(kvtrace._Container(path).metadata["kvtrace"])["steps"])
        t, path = self.record("--uncached")
        self.assertNotIn("state_row", json.loads(kvtrace._Container(path).metadata["kvtrace"])["steps"])
        # bfloat16: transformers keeps conv_states in the model's dtype and the recurrent state
        # in float32; both stored as F32 beside BF16 K/V
        t, path = self.record("--dtype", "bfloat16", "--store", "BF16")
        f = kvtrace._Container(path)
        self.assertEqual((f.dtype("layer1.k"), f.dtype("layer0.conv_state"), f.dtype("layer0.recurrent_state")),
                         ("BF16", "F32", "F32"))
        bf = type(self.model).from_pretrained(self.MODEL, dtype=self.torch.bfloat16).eval()
        first = self.cache_states(self.PROMPT, bf)
        for l in (0, 2):
            np.testing.assert_array_equal(t.steps[0].layers[l].conv_state, first[l][0])
            np.testing.assert_array_equal(t.steps[0].layers[l].recurrent_state, first[l][1])

    def test_recording_a_left_padded_batch_records_each_rows_states(self):
        from kvscope_trace import recording
        torch = self.torch
        short = [8, 9]  # 5 pads: two of them inside the conv window after the prefill
        ids = torch.tensor([self.PROMPT, [0] * 5 + short])
        mask = torch.tensor([[1] * 7, [0] * 5 + [1] * 2])
        path = self.path("rec.kvtrace")
        with recording(self.model, path, model_dir=self.MODEL, fingerprint=False):
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, do_sample=False,
                                      pad_token_id=0, return_dict_in_generate=True)
        t = kvtrace.read_trace(path)
        f = kvtrace._Container(path)
        self.assertEqual(json.loads(f.metadata["kvtrace"])["steps"]["state_row"], list(range(10)))
        self.assertEqual(list(f.shape("layer2.recurrent_state")), [10, 4, 8, 8])
        from transformers import DynamicCache
        batched = DynamicCache(config=self.model.config)
        with torch.no_grad():
            self.model(ids, attention_mask=mask, past_key_values=batched, use_cache=True)
        for b, prompt in enumerate((self.PROMPT, short)):
            steps = t.steps_of(b)
            self.assertEqual(len(steps), 5)
            alone = self.cache_states(prompt)
            for l in (0, 2):
                # after the prefill: a batched forward's cache's row b (pads included in what it
                # consumed; generate's prefill differs from this forward by float rounding)
                np.testing.assert_allclose(steps[0].layers[l].conv_state, batched.layers[l].conv_states[0][b].numpy(),
                                           rtol=0, atol=1e-5)
                np.testing.assert_allclose(steps[0].layers[l].recurrent_state,
                                           batched.layers[l].recurrent_states[0][b].numpy(), rtol=0, atol=1e-5)
                # left pads leave no trace in the state: their inputs are zeroed (as for one row
                # alone, whose conv window starts with zeros too)
                if b == 1:
                    np.testing.assert_array_equal(steps[0].layers[l].conv_state[:, :2], 0)
                np.testing.assert_allclose(steps[0].layers[l].conv_state, alone[l][0], rtol=0, atol=1e-5)
                np.testing.assert_allclose(steps[0].layers[l].recurrent_state, alone[l][1], rtol=0, atol=1e-5)
                # after the last step: what generate's cache holds for the row
                cache = out.past_key_values.layers[l]
                np.testing.assert_array_equal(steps[-1].layers[l].conv_state, cache.conv_states[0][b].numpy())
                np.testing.assert_array_equal(steps[-1].layers[l].recurrent_state, cache.recurrent_states[0][b].numpy())
        with self.assertRaises(ValueError):
            with recording(self.model, self.path("bad.kvtrace"), state_every=-1):
                pass
        path = self.path("every2.kvtrace")
        with recording(self.model, path, model_dir=self.MODEL, fingerprint=False, state_every=2):
            self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0)
        self.assertEqual(json.loads(kvtrace._Container(path).metadata["kvtrace"])["steps"]["state_row"],
                         [0, 1, -1, -1, 2, 3, -1, -1, 4, 5])


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
