#!/usr/bin/env python3
"""Tests for tools/kvtrace.py and the recording side of tools/hf_trace.py (numpy only).

    /usr/bin/python3 -m unittest tools/test_kvtrace.py
    /usr/bin/python3 tools/test_kvtrace.py
"""

import contextlib
import io
import json
import os
import struct
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_trace  # noqa: E402
import kvtrace  # noqa: E402

MODEL = {"architecture": "llama", "num_layers": 3, "num_heads": 4, "num_kv_heads": 2,
         "head_dim": 16, "vocab_size": 1200, "max_positions": 128}


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def small_writer(dtype="F32", snapshots=False, appended=True, seed=0):
    """Two requests; request 1 is sampled and has a cache reset at its step 2."""
    rng = np.random.default_rng(seed)
    w = kvtrace.TraceWriter(MODEL, engine="test 1.0", dtype=dtype)
    w.add_request(0, prompt_ids=[0, 34, 86], generated=[422, 623], max_new_tokens=2,
                  prompt_text="Audit", eos_ids=[1], stop_reason="max_new_tokens")
    w.add_request(1, prompt_ids=[0, 316, 284, 7], generated=[5, 6, 7], max_new_tokens=3,
                  policy={"temperature": 0.8, "top_k": 50, "top_p": 0.9, "seed": 11},
                  stop_reason="max_new_tokens", arrival_tick=1, batch_group=-1)
    w.add_event("weight_update", tick=3, tensor="model.layers.0.self_attn.k_proj.weight",
                scale=0.5, seed=7, weights_version=1)
    caches = {0: [np.zeros((2, 0, 16), np.float32)] * 3, 1: [np.zeros((2, 0, 16), np.float32)] * 3}
    vcaches = dict(caches)
    plan = [  # request, step, fed, positions, chosen, events
        (0, 0, [0, 34, 86], [0, 1, 2], 422, ["arrival"]),
        (1, 0, [0, 316, 284, 7], [0, 1, 2, 3], 5, ["arrival"]),
        (0, 1, [422], [3], 623, []),
        (1, 1, [5], [4], 6, []),
        (1, 2, [0, 316, 284, 7, 5, 6], [0, 1, 2, 3, 4, 5], 7, ["cache_reset"]),
    ]
    for tick, (r, step, fed, pos, chosen, events) in enumerate(plan):
        if "cache_reset" in events:
            caches[r] = [np.zeros((2, 0, 16), np.float32)] * 3
            vcaches[r] = list(caches[r])
        k = [rand(rng, 2, len(fed), 16) for _ in range(3)]
        v = [rand(rng, 2, len(fed), 16) for _ in range(3)]
        caches[r] = [np.concatenate([c, n], axis=1) for c, n in zip(caches[r], k)]
        vcaches[r] = [np.concatenate([c, n], axis=1) for c, n in zip(vcaches[r], v)]
        kw = {}
        if appended:
            kw.update(keys=k, values=v)
        if snapshots:
            kw.update(cache_keys=caches[r], cache_values=vcaches[r])
        w.add_step(request=r, step=step, fed_ids=fed, positions=pos, chosen=chosen,
                   logits=rand(rng, 1200), events=events, tick=tick, slot=r,
                   rng_draws_before=step if r == 1 else 0, rng_draws_after=step + 1 if r == 1 else 0,
                   weights_version=1 if tick >= 3 else 0, **kw)
    return w


class TempDir:
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)


class RoundTrip(TempDir, unittest.TestCase):
    def test_write_read_preserves_every_field(self):
        w = small_writer()
        w.steps[2].fed_mask = [1]
        w.steps[0].layers[0].checksum_k = "00000000deadbeef"
        w.faults = ["rng_reseed:request=1"]
        for l in w.steps[0].layers:
            l.checksum_k, l.checksum_v = "0123456789abcdef", "fedcba9876543210"
        path = self.path("rt.kvtrace")
        w.save(path)
        t = kvtrace.read_trace(path)
        self.assertEqual(t.engine, "test 1.0")
        self.assertEqual(t.mode, "cached")
        self.assertEqual(t.model["num_layers"], 3)
        self.assertEqual(t.model["architecture"], "llama")
        self.assertEqual(t.faults, ["rng_reseed:request=1"])
        self.assertEqual(t.requests[1]["policy"],
                         {"temperature": 0.8, "top_k": 50, "top_p": 0.9, "seed": 11, "tie_rule": "lowest"})
        self.assertEqual(t.requests[0]["prompt_text"], "Audit")
        self.assertEqual(t.events[0]["tensor"], "model.layers.0.self_attn.k_proj.weight")
        self.assertEqual(t.events[0]["scale"], 0.5)
        self.assertEqual(len(t.steps), 5)
        for a, b in zip(w.steps, t.steps):
            for f in ("request", "step", "tick", "slot", "fed_ids", "positions", "chosen",
                      "rng_draws_before", "rng_draws_after", "weights_version", "events"):
                self.assertEqual(getattr(a, f), getattr(b, f), f)
            np.testing.assert_array_equal(a.logits, b.logits)
            for la, lb in zip(a.layers, b.layers):
                np.testing.assert_array_equal(la.keys, lb.keys)
                np.testing.assert_array_equal(la.values, lb.values)
                self.assertEqual(la.cache_length, lb.cache_length)
        self.assertEqual(t.steps[2].fed_mask, [1])
        self.assertEqual(t.steps[0].layers[0].checksum_k, "0123456789abcdef")
        self.assertEqual(t.steps[1].layers[2].checksum_k, None)
        # cache lengths derived per request, with the reset
        self.assertEqual([s.layers[0].cache_length for s in t.steps], [3, 4, 4, 5, 6])
        self.assertEqual(t.stored_dtypes, ["F32"])
        self.assertEqual([s.step for s in t.steps_of(1)], [0, 1, 2])

    def test_file_layout_is_safetensors(self):
        path = self.path("layout.kvtrace")
        small_writer().save(path)
        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        self.assertEqual((8 + n) % 8, 0, "data buffer must start 8-byte aligned")
        header = json.loads(data[8:8 + n])
        self.assertEqual(header["__metadata__"]["format"], "kvtrace")
        self.assertEqual(header["__metadata__"]["kvtrace_version"], "1")
        doc = json.loads(header["__metadata__"]["kvtrace"])
        self.assertEqual(doc["version"], 1)
        self.assertEqual(header["step0.layer2.k"]["shape"], [2, 3, 16])
        self.assertEqual(header["step0.logits"]["dtype"], "F32")
        end = max(e["data_offsets"][1] for k, e in header.items() if k != "__metadata__")
        self.assertEqual(len(data), 8 + n + end)

    def test_roundtrip_rewrite_is_identical(self):
        a, b = self.path("a.kvtrace"), self.path("b.kvtrace")
        small_writer(snapshots=True).save(a)
        kvtrace.write_trace(kvtrace.read_trace(a), b)
        with open(a, "rb") as fa, open(b, "rb") as fb:
            self.assertEqual(fa.read(), fb.read())

    def test_f16_and_bf16_storage(self):
        w = small_writer(dtype="F16")
        path = self.path("f16.kvtrace")
        w.save(path)
        t = kvtrace.read_trace(path)
        self.assertEqual(t.stored_dtypes, ["F16"])
        want = w.steps[3].layers[1].keys.astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(t.steps[3].layers[1].keys, want)
        np.testing.assert_allclose(t.steps[0].logits, w.steps[0].logits, atol=4e-3, rtol=1e-3)
        w = small_writer(dtype="BF16")
        path = self.path("bf16.kvtrace")
        w.save(path)
        t = kvtrace.read_trace(path)
        self.assertEqual(t.stored_dtypes, ["BF16"])
        np.testing.assert_allclose(t.steps[0].logits, w.steps[0].logits, atol=3e-2, rtol=8e-3)
        bits = np.array([1.0, -2.5, 1.00390625, 1.01171875], np.float32)  # exact, tie, tie
        self.assertEqual(list(kvtrace._to_bf16_bits(bits)), [0x3F80, 0xC020, 0x3F80, 0x3F82])

    def test_snapshot_only_trace_derives_appended_records(self):
        full = small_writer(snapshots=True, appended=True)
        only = small_writer(snapshots=True, appended=False)
        path = self.path("snap.kvtrace")
        only.save(path)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            names = json.loads(f.read(n)).keys()
        self.assertFalse(any(k.endswith(".k") for k in names))
        t = kvtrace.read_trace(path)
        self.assertTrue(t.has_snapshots())
        for a, b in zip(full.steps, t.steps):
            for la, lb in zip(a.layers, b.layers):
                np.testing.assert_array_equal(la.keys, lb.keys)
                np.testing.assert_array_equal(la.values, lb.values)
                self.assertTrue(lb.derived)
                self.assertEqual(lb.cache_length, la.cache_keys.shape[1])
        # rewriting keeps it snapshot-only
        again = self.path("snap2.kvtrace")
        kvtrace.write_trace(t, again)
        self.assertEqual(os.path.getsize(again), os.path.getsize(path))

    def test_writer_rejects_bad_input(self):
        w = kvtrace.TraceWriter(MODEL)
        w.add_request(0, prompt_ids=[1, 2])
        with self.assertRaisesRegex(ValueError, "keys\\[1\\]: shape"):
            w.add_step(0, 0, [1, 2], [0, 1], keys=[np.zeros((2, 2, 16))] + [np.zeros((3, 2, 16))] * 2,
                       values=[np.zeros((2, 2, 16))] * 3)
        with self.assertRaisesRegex(ValueError, "logits"):
            w.add_step(0, 0, [1, 2], [0, 1], chosen=3)
        with self.assertRaisesRegex(ValueError, "positions"):
            w.add_step(0, 0, [1, 2], [0])
        with self.assertRaisesRegex(ValueError, "vocabulary"):
            w.add_request(1, prompt_ids=[5000])
        with self.assertRaisesRegex(ValueError, "num_kv_heads"):
            kvtrace.TraceWriter({"num_layers": 1, "head_dim": 2, "vocab_size": 3})
        with self.assertRaisesRegex(ValueError, "top_p|top-p"):
            w.add_request(2, prompt_ids=[1], policy={"temperature": 1.0, "top_p": 0.0})
        # a batch-of-one leading axis is accepted
        w.add_step(0, 0, [1, 2], [0, 1], keys=[np.zeros((1, 2, 2, 16))] * 3,
                   values=[np.zeros((1, 2, 2, 16))] * 3)


class Validation(TempDir, unittest.TestCase):
    def error(self, path):
        with self.assertRaises(kvtrace.TraceError) as cm:
            kvtrace.read_trace(path)
        self.assertEqual(cm.exception.file, path)
        self.assertIsInstance(cm.exception, ValueError)
        return cm.exception

    def rewrite(self, name, edit_doc=None, drop=(), meta=None):
        """small_writer's trace with the document edited and/or tensors dropped."""
        t = small_writer().to_trace()
        doc = kvtrace.document(t)
        if edit_doc:
            edit_doc(doc)
        tensors = []
        for i, s in enumerate(t.steps):
            tensors.append((f"step{i}.logits", s.logits, "F32"))
            for l, rec in enumerate(s.layers):
                tensors += [(f"step{i}.layer{l}.k", rec.keys, "F32"), (f"step{i}.layer{l}.v", rec.values, "F32")]
        tensors = [x for x in tensors if x[0] not in drop]
        m = {"format": "kvtrace", "kvtrace_version": "1", "kvtrace": json.dumps(doc)}
        m.update(meta or {})
        path = self.path(name)
        kvtrace.write_safetensors(path, tensors, m)
        return path

    def test_truncated_file(self):
        path = self.path("trunc.kvtrace")
        small_writer().save(path)
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size // 2)
        e = self.error(path)
        self.assertIn("beyond the data buffer", str(e))
        self.assertIn("data_offsets", e.field)
        with open(path, "r+b") as f:
            f.truncate(5)
        self.assertEqual(self.error(path).field, "header length")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 1000) + b"{}")
        self.assertIn("truncated", str(self.error(path)))

    def test_wrong_format_and_version(self):
        path = self.path("plain.safetensors")
        kvtrace.write_safetensors(path, [("x", np.zeros(2, np.float32), "F32")], {})
        self.assertEqual(self.error(path).field, "__metadata__.format")
        e = self.error(self.rewrite("v9.kvtrace", meta={"kvtrace_version": "9"}))
        self.assertEqual(e.field, "__metadata__.kvtrace_version")
        self.assertIn("version 9 is not supported", str(e))
        e = self.error(self.rewrite("doc2.kvtrace", edit_doc=lambda d: d.update(version=2)))
        self.assertEqual(e.field, "version")
        e = self.error(self.rewrite("json.kvtrace", meta={"kvtrace": "{not json"}))
        self.assertEqual(e.field, "__metadata__.kvtrace")

    def test_missing_tensors(self):
        e = self.error(self.rewrite("nologits.kvtrace", drop=["step2.logits"]))
        self.assertEqual(e.field, "step2.logits")
        self.assertIn("truncated trace", str(e))
        e = self.error(self.rewrite("nok.kvtrace", drop=["step1.layer2.k", "step1.layer2.v"]))
        self.assertEqual(e.field, "step1.layer2.k")
        e = self.error(self.rewrite("nov.kvtrace", drop=["step0.layer1.v"]))
        self.assertEqual(e.field, "step0.layer1.v")

    def test_inconsistent_fields_name_the_field(self):
        def bad_positions(d):
            d["steps"][1]["positions"].append(99)
        self.assertEqual(self.error(self.rewrite("pos.kvtrace", bad_positions)).field, "steps[1].positions")

        def bad_heads(d):
            d["model"]["num_kv_heads"] = 3
        self.assertEqual(self.error(self.rewrite("heads.kvtrace", bad_heads)).field, "step0.layer0.k")

        def bad_vocab(d):
            d["model"]["vocab_size"] = 1000
        e = self.error(self.rewrite("vocab.kvtrace", bad_vocab))
        self.assertEqual(e.field, "step0.logits")

        def bad_prompt(d):
            d["requests"][1]["prompt_ids"].append(1200)
        self.assertEqual(self.error(self.rewrite("prompt.kvtrace", bad_prompt)).field, "requests[1].prompt_ids")

        def bad_request(d):
            d["steps"][3]["request"] = 7
        self.assertEqual(self.error(self.rewrite("req.kvtrace", bad_request)).field, "steps[3].request")

        def missing_layers(d):
            del d["model"]["num_layers"]
        self.assertEqual(self.error(self.rewrite("nl.kvtrace", missing_layers)).field, "model.num_layers")

        def float_step(d):
            d["steps"][0]["step"] = 0.5
        self.assertEqual(self.error(self.rewrite("fs.kvtrace", float_step)).field, "steps[0].step")

        def bad_policy(d):
            d["requests"][1]["policy"]["temperature"] = -1
        self.assertEqual(self.error(self.rewrite("pol.kvtrace", bad_policy)).field, "requests[1].policy")

        def bad_mode(d):
            d["mode"] = "speculative"
        self.assertEqual(self.error(self.rewrite("mode.kvtrace", bad_mode)).field, "mode")

        def bad_lengths(d):
            d["steps"][0]["cache_lengths"] = [3, 3]
        self.assertEqual(self.error(self.rewrite("len.kvtrace", bad_lengths)).field, "steps[0].cache_lengths")

        def bad_checksum(d):
            d["steps"][0]["checksums_k"] = ["xyz"] * 3
            d["steps"][0]["checksums_v"] = ["0"] * 3
        self.assertEqual(self.error(self.rewrite("ck.kvtrace", bad_checksum)).field, "steps[0].checksums_k")


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
        llama = os.path.join(HERE, "..", "tests", "fixtures", "hf", "models", "llama")
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
        self.assertIn("hf_trace.py", t.engine)
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


class FakeXxhash:
    """Stands in for the optional xxhash module to test the checksum plumbing."""
    @staticmethod
    def xxh3_64_intdigest(data):
        import hashlib
        return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


class Checksums(TempDir, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.saved = kvtrace._xxhash, kvtrace.HAVE_XXHASH
        kvtrace._xxhash, kvtrace.HAVE_XXHASH = FakeXxhash, True

    def tearDown(self):
        kvtrace._xxhash, kvtrace.HAVE_XXHASH = self.saved
        super().tearDown()

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

    def test_writer_checksums_snapshots(self):
        path = self.path("snap.kvtrace")
        small_writer(snapshots=True).save(path)
        t = kvtrace.read_trace(path)
        rec = t.steps[4].layers[2]
        self.assertEqual(rec.checksum_k, kvtrace.cache_checksum(rec.cache_keys))
        self.assertEqual(rec.checksum_v, kvtrace.cache_checksum(rec.cache_values))

    def test_uncached_mode_records_none(self):
        lm = FakeLM()
        rec = hf_trace.TraceRecorder(lm.info(), engine="fake", mode="uncached")
        hf_trace.decode(lm.forward("v5"), rec, 0, [3, 4, 5], 2, None, uncached=True)
        self.assertTrue(all(l.checksum_k is None for s in rec.writer.steps for l in s.layers))


class Cli(TempDir, unittest.TestCase):
    def run_main(self, *argv):
        out = io.StringIO()
        err = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = kvtrace.main(list(argv))
        return rc, out.getvalue() + err.getvalue()

    def test_info_and_roundtrip(self):
        a, b = self.path("a.kvtrace"), self.path("b.kvtrace")
        small_writer(snapshots=True).save(a)
        rc, out = self.run_main("info", a)
        self.assertEqual(rc, 0, out)
        self.assertIn("requests: 2, steps: 5, snapshots: yes", out)
        self.assertIn("T=0.8 top-k=50 top-p=0.9 seed=11", out)
        rc, out = self.run_main("roundtrip", a, b, "--dtype", "F16")
        self.assertEqual(rc, 0, out)
        self.assertEqual(kvtrace.read_trace(b).stored_dtypes, ["F16"])
        rc, out = self.run_main("roundtrip", a, b)
        self.assertEqual(rc, 2)
        self.assertIn("refusing to overwrite", out)
        with open(a, "r+b") as f:
            f.truncate(100)
        rc, out = self.run_main("info", a)
        self.assertEqual(rc, 2)
        self.assertIn("error:", out)

    def test_fingerprint(self):
        d = self.path("m")
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write("{}")
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(b"weights")
        import hashlib
        want = hashlib.sha256(b"config.json{}model.safetensorsweights").hexdigest()
        self.assertEqual(kvtrace.model_fingerprint(d), want)

    def test_model_block_from_a_transformers_config(self):
        llama = os.path.join(HERE, "..", "tests", "fixtures", "hf", "models", "llama")
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
