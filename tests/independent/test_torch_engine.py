"""Tests of the independent torch engine (st_numpy, torch_model, torch_engine, record_run).

    /usr/bin/python3 -m unittest discover -s tests/independent -p "test_*.py"

Needs numpy and torch (Debian's python3-torch); without them the module is skipped.
The checks: float32 forward and greedy decode against the transformers golden fixtures,
cached vs uncached agreement, bf16/f16 really in reduced precision yet close to float32,
each bug changing the recorded trace the way it should, the transformers-recorded bug
scenarios reproduced, and written traces read back with kvscope_trace.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the interpreter
    if os.environ.get("CI"):  # CI installs python3-torch (scripts/setup.sh): a skip there hides a break
        raise
    raise unittest.SkipTest(f"the independent engine needs numpy and torch ({e}); "
                            "run with /usr/bin/python3 (python3-torch)")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(REPO, "python"))  # kvscope_trace: the installed package, else the source
import kvscope_trace as kvtrace  # noqa: E402
import record_run  # noqa: E402
import st_numpy  # noqa: E402
import torch_engine as te  # noqa: E402

HF = os.path.join(REPO, "tests", "fixtures", "hf")
MODELS = {n: os.path.join(HF, "models", n) for n in ("gpt2", "llama")}


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


GOLDEN = {n: read_json(os.path.join(HF, "golden", f"{n}.json")) for n in MODELS}
PROMPT = {n: GOLDEN[n]["prompts"][0]["ids"] for n in MODELS}
TOL = 1e-4


def golden_tensors(name):
    return st_numpy.load_file(os.path.join(HF, "golden", f"{name}.safetensors"))


class _Temp(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp, name)


class SafetensorsReaderTest(_Temp):
    def test_roundtrip_and_shards(self):
        full = st_numpy.load_checkpoint(MODELS["llama"])
        names = sorted(full)
        half = len(names) // 2
        shard_dir = self.path("sharded")
        os.makedirs(shard_dir)
        weight_map = {}
        for i, part in enumerate((names[:half], names[half:])):
            fname = f"model-0000{i + 1}-of-00002.safetensors"
            st_numpy.save_file(os.path.join(shard_dir, fname), {k: full[k] for k in part})
            weight_map.update({k: fname for k in part})
        with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        again = st_numpy.load_checkpoint(shard_dir)
        self.assertEqual(sorted(again), names)
        for k in names:
            np.testing.assert_array_equal(again[k], full[k])

    def _write_raw(self, path, header, data):
        raw = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + data)

    def test_bf16_and_f16(self):
        values = np.array([1.0, -2.5, 0.1, 3.0e4], dtype=np.float32)
        bf16 = (values.view(np.uint32) >> 16).astype("<u2")  # truncation: exact bf16 values
        f16 = values.astype("<f2")
        data = bf16.tobytes() + f16.tobytes()
        self._write_raw(self.path("x.safetensors"), {
            "a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]},
            "b": {"dtype": "F16", "shape": [2, 2], "data_offsets": [8, 16]}}, data)
        t = st_numpy.load_file(self.path("x.safetensors"))
        np.testing.assert_array_equal(t["a"], (bf16.astype(np.uint32) << 16).view(np.float32))
        self.assertEqual(t["a"].dtype, np.float32)
        self.assertAlmostEqual(float(t["a"][1]), -2.5)
        np.testing.assert_array_equal(t["b"].reshape(-1), f16)

    def test_bad_input_names_file_and_tensor(self):
        p = self.path("bad.safetensors")
        self._write_raw(p, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8)
        with self.assertRaises(ValueError) as cm:
            st_numpy.load_file(p)
        self.assertIn("bad.safetensors", str(cm.exception))
        self.assertIn("'w'", str(cm.exception))
        self._write_raw(p, {"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
        with self.assertRaisesRegex(ValueError, "unsupported dtype"):
            st_numpy.load_file(p)
        with open(p, "wb") as f:
            f.write(b"\x05")
        with self.assertRaisesRegex(ValueError, "bad.safetensors"):
            st_numpy.load_file(p)


class GoldenTest(unittest.TestCase):
    """float32 against transformers (prompt logits, prefill caches, greedy decode)."""

    def test_forward_and_greedy_match_transformers(self):
        for name, d in MODELS.items():
            g = golden_tensors(name)
            model = te.Model(d)
            engine = te.DecodeEngine(model)
            L = model.cfg.num_layers
            for i, p in enumerate(GOLDEN[name]["prompts"]):
                with self.subTest(model=name, prompt=i):
                    ids = p["ids"]
                    cache = te.KVCache(L)
                    logits = model.forward(ids, list(range(len(ids))), cache).numpy()
                    self.assertLess(np.abs(logits - g[f"p{i}.prompt_logits"]).max(), TOL)
                    ks, vs = cache.snapshot()
                    for l in range(L):
                        self.assertLess(np.abs(ks[l] - g[f"p{i}.prefill.layer{l}.k"]).max(), TOL)
                        self.assertLess(np.abs(vs[l] - g[f"p{i}.prefill.layer{l}.v"]).max(), TOL)
                    run = engine.run_cached(ids, 16)
                    self.assertEqual(run.requests[0]["generated"], p["greedy_manual"])
                    steps = np.stack([s.logits for s in run.steps])
                    self.assertLess(np.abs(steps - g[f"p{i}.greedy.step_logits"]).max(), TOL)
                    last = run.steps[-1]
                    for l in range(L):
                        self.assertLess(np.abs(last.cache_keys[l] - g[f"p{i}.final.layer{l}.k"]).max(), TOL)

    def test_cached_matches_uncached(self):
        for name, d in MODELS.items():
            with self.subTest(model=name):
                engine = te.DecodeEngine(te.Model(d))
                c = engine.run_cached(PROMPT[name], 10)
                u = engine.run_uncached(PROMPT[name], 10)
                self.assertEqual(c.requests[0]["generated"], u.requests[0]["generated"])
                for sc, su in zip(c.steps, u.steps):
                    self.assertEqual((sc.fed_ids, sc.positions), (su.fed_ids, su.positions))
                    self.assertLess(np.abs(sc.logits - su.logits).max(), TOL)
                    for l in range(len(sc.cache_keys)):
                        self.assertEqual(sc.cache_keys[l].shape, su.cache_keys[l].shape)
                        self.assertLess(np.abs(sc.cache_keys[l] - su.cache_keys[l]).max(), TOL)
                        self.assertLess(np.abs(sc.cache_values[l] - su.cache_values[l]).max(), TOL)


class ReducedPrecisionTest(unittest.TestCase):
    BOUND = {"bfloat16": 2.0, "float16": 0.25}  # loose: observed 0.86 and 0.08 on these models

    def test_bf16_and_f16_close_but_not_equal(self):
        for name, d in MODELS.items():
            ref = te.DecodeEngine(te.Model(d)).run_cached(PROMPT[name], 4)
            for dtype, bound in self.BOUND.items():
                with self.subTest(model=name, dtype=dtype):
                    engine = te.DecodeEngine(te.Model(d, dtype))
                    run = engine.run_cached(PROMPT[name], 4)
                    diff = np.abs(run.steps[0].logits - ref.steps[0].logits).max()
                    self.assertGreater(diff, 0.0)
                    self.assertLess(diff, bound)
                    self.assertEqual(run.steps[0].chosen, ref.steps[0].chosen)
                    k = torch.from_numpy(run.steps[0].cache_keys[1])
                    rounded = k.bfloat16().float() if dtype == "bfloat16" else k.half().float()
                    self.assertTrue(torch.equal(k, rounded), "cache not held in the reduced dtype")
                    self.assertGreater(np.abs(run.steps[0].cache_keys[1] - ref.steps[0].cache_keys[1]).max(), 0)
                    unc = engine.run_uncached(PROMPT[name], 4)
                    self.assertLess(np.abs(unc.steps[0].logits - run.steps[0].logits).max(), bound)


class BugTest(_Temp):
    def setUp(self):
        super().setUp()
        self.gpt2 = te.Model(MODELS["gpt2"])
        self.clean = te.DecodeEngine(self.gpt2).run_cached(PROMPT["gpt2"], 8)

    def run_bug(self, bug, model=None, **kw):
        return te.DecodeEngine(model or self.gpt2, bug, kw.pop("second_model", None)).run_cached(
            PROMPT["gpt2"], 8, **kw)

    def test_parse_bug(self):
        self.assertEqual(te.parse_bug("wrong_layer:layer=2,source=0,step=3"),
                         [{"name": "wrong_layer", "layer": 2, "source": 0, "step": 3}])
        self.assertEqual(te.parse_bug("cross_request:prompt=5/6/7")[0]["prompt"], [5, 6, 7])
        self.assertEqual(len(te.parse_bug("wrong_layer+cross_request")), 2)
        for bad in ("nope", "wrong_layer:depth=1", "wrong_position:offset=x", "wrong_layer+duplicate_append"):
            with self.assertRaises(ValueError):
                te.parse_bug(bad)

    def test_wrong_layer(self):
        run = self.run_bug("wrong_layer:layer=2,source=0,step=3")
        for s, c in zip(run.steps, self.clean.steps):
            self.assertEqual(s.cache_keys[2].shape, c.cache_keys[2].shape)  # length stays right
            same = np.array_equal(s.cache_keys[2], s.cache_keys[0]) and np.array_equal(s.cache_values[2], s.cache_values[0])
            self.assertEqual(same, s.step >= 3)
        self.assertGreater(np.abs(run.steps[3].logits - self.clean.steps[3].logits).max(), 1e-3)
        with self.assertRaises(ValueError):
            te.DecodeEngine(self.gpt2, "wrong_layer:layer=0,source=1").new_cache()

    def test_cross_request(self):
        run = self.run_bug("cross_request:step=3")
        order = [(s.request, s.step) for s in run.steps]
        self.assertEqual(order[:5], [(0, 0), (0, 1), (0, 2), (1, 0), (0, 3)])
        self.assertEqual({s.slot for s in run.steps}, {0})
        self.assertEqual([r["id"] for r in run.requests], [0, 1])
        other = run.steps[3]
        self.assertEqual(len(other.fed_ids), len(PROMPT["gpt2"]) + 2)
        victim = run.steps[4]
        n = other.cache_keys[0].shape[1]
        for l in range(3):  # request 0 continues on request 1's records
            np.testing.assert_array_equal(victim.cache_keys[l][:, :n], other.cache_keys[l])
        self.assertEqual(victim.positions, [n])
        self.assertGreater(np.abs(victim.logits - self.clean.steps[3].logits).max(), 1e-3)

    def test_duplicate_append(self):
        run = self.run_bug("duplicate_append:step=2")
        lengths = [s.cache_keys[0].shape[1] for s in run.steps]
        P = len(PROMPT["gpt2"])
        self.assertEqual(lengths[:4], [P, P + 1, P + 3, P + 5])
        self.assertEqual([s.positions[0] for s in run.steps[1:4]], [P, P + 1, P + 3])
        k = run.steps[2].cache_keys[1]
        np.testing.assert_array_equal(k[:, -1], k[:, -2])
        np.testing.assert_array_equal(run.steps[2].logits, self.clean.steps[2].logits)  # one copy seen
        self.assertGreater(np.abs(run.steps[3].logits - self.clean.steps[3].logits).max(), 1e-4)

    def test_positions(self):
        P = len(PROMPT["gpt2"])
        run = self.run_bug("wrong_position:offset=-1,step=2")
        self.assertEqual([s.positions[-1] for s in run.steps[:4]], [P - 1, P, P, P + 1])
        run = self.run_bug("positions_from_zero")
        self.assertEqual([s.positions for s in run.steps[1:4]], [[0], [0], [0]])
        self.assertEqual([s.cache_keys[0].shape[1] for s in run.steps[1:3]], [P + 1, P + 2])

    def test_chunked_prefill(self):
        """prefill_chunk: the prompt fed 4 tokens per forward gives the whole prefill's cache
        and tokens; chunk_position restarts the ids from its chunk, or (llama, layer L) keeps
        them and changes only layer L's keys (values and the layers below exact)."""
        P = len(PROMPT["gpt2"])
        run = self.run_bug("prefill_chunk:size=4")
        chunks = -(-P // 4)
        self.assertEqual([s.chosen for s in run.steps[:chunks - 1]], [-1] * (chunks - 1))
        self.assertTrue(all(s.logits is None for s in run.steps[:chunks - 1]))
        self.assertEqual(run.steps[chunks - 1].positions, list(range(4 * (chunks - 1), P)))
        self.assertEqual(run.requests[0]["generated"], self.clean.requests[0]["generated"])
        last, whole = run.steps[chunks - 1], self.clean.steps[0]
        for l in range(3):
            np.testing.assert_allclose(last.cache_keys[l], whole.cache_keys[l], atol=1e-4)
        np.testing.assert_allclose(last.logits, whole.logits, atol=1e-4)
        run = self.run_bug("chunk_position:size=4,chunk=2")
        self.assertEqual([s.positions for s in run.steps[:3]], [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]])
        with self.assertRaises(ValueError):  # gpt2: positions enter once, at the input
            self.run_bug("chunk_position:layer=1")
        llama = te.Model(MODELS["llama"])
        engine = te.DecodeEngine(llama, "prefill_chunk:size=4")
        ok = engine.run_cached(PROMPT["llama"], 2)
        bad = te.DecodeEngine(llama, "chunk_position:size=4,chunk=1,layer=1").run_cached(PROMPT["llama"], 2)
        self.assertEqual(bad.steps[1].positions, [4, 5, 6, 7])  # the recorded ids stay right
        a, b = ok.steps[1], bad.steps[1]
        np.testing.assert_array_equal(a.cache_keys[0], b.cache_keys[0])
        np.testing.assert_array_equal(a.cache_values[1], b.cache_values[1])
        np.testing.assert_array_equal(a.cache_keys[1][:, :4], b.cache_keys[1][:, :4])
        self.assertGreater(np.abs(a.cache_keys[1][:, 4:] - b.cache_keys[1][:, 4:]).max(), 1e-3)

    def test_stale_cache(self):
        run = self.run_bug("stale_cache:step=4", second_model=os.path.join(HF, "models", "gpt2-updated"))
        self.assertEqual([s.weights_version for s in run.steps], [0] * 4 + [1] * 4)
        self.assertEqual(run.requests[0]["generated"][:4], self.clean.requests[0]["generated"][:4])
        P = len(PROMPT["gpt2"])
        for l in range(3):  # the old cache kept: rows of earlier steps unchanged
            np.testing.assert_array_equal(run.steps[4].cache_keys[l][:, :P + 3], self.clean.steps[3].cache_keys[l])
        self.assertGreater(np.abs(run.steps[4].logits - self.clean.steps[4].logits).max(), 1e-3)
        self.assertEqual(self.gpt2.directory, MODELS["gpt2"])  # weights restored afterwards
        with self.assertRaises(ValueError):
            te.DecodeEngine(self.gpt2, "stale_cache")

    def test_tie_rule_with_tied_checkpoint(self):
        for name in MODELS:
            with self.subTest(model=name):
                tied_dir = self.path(f"tied-{name}")
                info = record_run.make_tied_checkpoint(MODELS[name], tied_dir, PROMPT[name], tie_step=2)
                a, b = info["token_a"], info["token_b"]
                self.assertLess(a, b)
                self.assertTrue(os.path.exists(os.path.join(tied_dir, "tokenizer.json")))
                tied = te.Model(tied_dir)
                lowest = te.DecodeEngine(tied).run_cached(PROMPT[name], 6)
                self.assertEqual(lowest.requests[0]["generated"], info["clean_tokens"] + lowest.requests[0]["generated"][3:])
                self.assertEqual(lowest.steps[2].tied, [a, b])
                highest = te.DecodeEngine(tied, "tie_rule").run_cached(PROMPT[name], 6)
                self.assertEqual(highest.requests[0]["generated"][:3], info["clean_tokens"][:2] + [b])
                self.assertEqual(highest.injected[0]["step"], 2)

    def test_rng_extra_draw(self):
        same = [self.run_bug(None, temperature=0.8, seed=1234) for _ in range(2)]
        self.assertEqual(same[0].requests[0]["generated"], same[1].requests[0]["generated"])
        self.assertEqual([(s.rng_before, s.rng_after) for s in same[0].steps[:3]], [(0, 1), (1, 2), (2, 3)])
        extra = self.run_bug("rng_extra_draw", temperature=0.8, seed=1234)
        self.assertNotEqual(extra.requests[0]["generated"], same[0].requests[0]["generated"])
        self.assertEqual([(s.rng_before, s.rng_after) for s in extra.steps[:3]], [(1, 2), (3, 4), (5, 6)])
        with self.assertRaises(ValueError):
            self.run_bug("rng_extra_draw")

    def test_rope_scaling(self):
        """llama3 frequencies against values computed by hand from transformers' rule (head
        dim 16, theta 1e4, factor 8, original context 64, low/high 1/4), linear ones divided
        by the factor, and the rope_scaling bug: exact until its step, then keys differ at the
        layers it names while values stay exact at layer 0."""
        llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        m = te.Model(record_run.make_rope_checkpoint(MODELS["llama"], self.path("llama3"), llama3))
        inv = m._inv_freq().tolist()
        base = m._inv_freq(scaled=False).tolist()
        self.assertAlmostEqual(inv[0], 1.0, places=6)       # wavelength 6.3 < 16: kept
        self.assertAlmostEqual(inv[1], 0.24438, places=4)   # 19.9: smoothed (smooth 0.7403)
        self.assertAlmostEqual(inv[2], 0.013042, places=5)  # 62.8 <= 64: smoothed (0.0062)
        for i in range(3, 8):                                # above 64: divided by 8
            self.assertAlmostEqual(inv[i], base[i] / 8, places=9)
        lin = te.Model(record_run.make_rope_checkpoint(MODELS["llama"], self.path("linear"),
                                                       {"rope_type": "linear", "factor": 2.0}))
        for a, b in zip(lin._inv_freq().tolist(), base):
            self.assertAlmostEqual(a, b / 2, places=9)
        with self.assertRaises(ValueError):  # gpt2 has no RoPE; default RoPE has no scaling
            te.DecodeEngine(self.gpt2, "rope_scaling")
        clean = te.DecodeEngine(m).run_cached(PROMPT["llama"], 6)
        bug = te.DecodeEngine(m, "rope_scaling:step=3,layer=1").run_cached(PROMPT["llama"], 6)
        for a, b in zip(clean.steps[:3], bug.steps[:3]):
            np.testing.assert_array_equal(a.logits, b.logits)
        first, fresh = clean.steps[3], bug.steps[3]
        t = first.cache_keys[0].shape[1] - 1  # the step's own record
        np.testing.assert_array_equal(first.cache_keys[0][:, t], fresh.cache_keys[0][:, t])
        np.testing.assert_array_equal(first.cache_values[1][:, t], fresh.cache_values[1][:, t])
        self.assertGreater(float(np.abs(first.cache_keys[1][:, t] - fresh.cache_keys[1][:, t]).max()), 0.1)
        self.assertEqual([i for i in bug.injected if i["bug"] == "rope_scaling"][0]["step"], 3)

    def test_cache_bugs_on_llama_bf16(self):
        llama = te.Model(MODELS["llama"], "bfloat16")
        P = len(PROMPT["llama"])
        run = te.DecodeEngine(llama, "wrong_layer:layer=1,source=0,step=2").run_cached(PROMPT["llama"], 4)
        np.testing.assert_array_equal(run.steps[2].cache_keys[1], run.steps[2].cache_keys[0])
        self.assertFalse(np.array_equal(run.steps[1].cache_keys[1], run.steps[1].cache_keys[0]))
        run = te.DecodeEngine(llama, "duplicate_append").run_cached(PROMPT["llama"], 4)
        self.assertEqual([s.cache_values[2].shape[1] for s in run.steps], [P, P + 2, P + 4, P + 6])
        run = te.DecodeEngine(llama, "cross_request:step=2").run_cached(PROMPT["llama"], 4)
        self.assertEqual([(s.request, s.step, s.slot) for s in run.steps],
                         [(0, 0, 0), (0, 1, 0), (1, 0, 0), (0, 2, 0), (0, 3, 0)])

    def test_reproduces_transformers_scenarios(self):
        """The bugs as patched here give the runs transformers itself recorded
        (tests/fixtures/hf/scenarios: tokens, positions, logits and caches)."""
        scen, models = os.path.join(HF, "scenarios"), os.path.join(HF, "models")
        cases = {"clean": {}, "wrong_layer": {"bug": "wrong_layer:layer=1,source=0,step=1"},
                 "duplicate_append": {"bug": "duplicate_append"}, "wrong_position": {"bug": "wrong_position"},
                 "positions_from_zero": {"bug": "positions_from_zero"},
                 "cross_request": {"bug": "cross_request:step=4"},
                 "stale_cache": {"bug": "stale_cache:step=5", "second": "gpt2-updated"},
                 "tie_rule": {"bug": "tie_rule", "model": "gpt2-tied"},
                 "rng_same_order": {"temperature": 0.8}, "rng_extra_draw": {"bug": "rng_extra_draw", "temperature": 0.8}}
        for sc, c in cases.items():
            if not os.path.exists(os.path.join(scen, f"gpt2.{sc}.json")):
                continue
            with self.subTest(scenario=sc):
                meta = read_json(os.path.join(scen, f"gpt2.{sc}.json"))
                ten = st_numpy.load_file(os.path.join(scen, f"gpt2.{sc}.safetensors"))
                bug = te.parse_bug(c.get("bug"))
                if sc == "cross_request":
                    bug[0]["prompt"] = meta["request1_ids"]
                model = te.Model(os.path.join(models, c["model"])) if "model" in c else self.gpt2
                second = os.path.join(models, c["second"]) if "second" in c else None
                run = te.DecodeEngine(model, bug, second).run_cached(
                    meta["steps"][0]["input_ids"], len(meta["tokens"]), temperature=c.get("temperature", 0.0), seed=1234)
                self.assertEqual(run.requests[0]["generated"], meta["tokens"])
                self.assertEqual([(s.request, s.step) for s in run.steps], [(s["request"], s["step"]) for s in meta["steps"]])
                for s in run.steps:
                    key = f"r{s.request}.s{s.step}"
                    self.assertEqual(s.positions, ten[key + ".positions"].tolist())
                    self.assertLess(np.abs(s.logits - ten[key + ".logits"][-1]).max(), TOL)
                    for l in range(3):
                        self.assertLess(np.abs(s.cache_keys[l] - ten[f"{key}.layer{l}.k"]).max(), TOL)
                        self.assertLess(np.abs(s.cache_values[l] - ten[f"{key}.layer{l}.v"]).max(), TOL)


class SlidingWindowTest(_Temp):
    """Sliding-window layers (Mistral, Qwen2) and the ring cache (ring_cache.py): the mask is
    transformers' sliding one, a ring of S = W slots computes exactly what the growing cache
    does, and window_wrap loses a needed entry at the first wrapped step."""
    W, PROMPT = 6, [5, 17, 33, 2]  # 4 prompt tokens: the ring wraps at step 3 (cache index 6)

    @classmethod
    def setUpClass(cls):
        cls._dir = tempfile.TemporaryDirectory()
        src = MODELS["llama"]
        cls.ckpt = {"mistral": record_run.make_window_checkpoint(src, os.path.join(cls._dir.name, "m"), "mistral", cls.W),
                    "qwen2": record_run.make_window_checkpoint(src, os.path.join(cls._dir.name, "q"), "qwen2", cls.W,
                                                               max_window_layers=1)}

    @classmethod
    def tearDownClass(cls):
        cls._dir.cleanup()

    def config(self, **fields):
        d = tempfile.mkdtemp(dir=self.tmp)
        with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
            json.dump(dict(read_json(os.path.join(MODELS["llama"], "config.json")), **fields), f)
        return te.ModelConfig(d).windows

    def test_configs_read_the_windows_like_transformers(self):
        full, types = [None] * 3, ["sliding_attention", "full_attention", "sliding_attention"]
        self.assertEqual(self.config(model_type="mistral", sliding_window=8), [8] * 3)
        self.assertEqual(self.config(model_type="mistral", sliding_window=None), full)
        self.assertEqual(self.config(model_type="qwen2", sliding_window=8, use_sliding_window=False), full)
        self.assertEqual(self.config(model_type="qwen2", sliding_window=8, use_sliding_window=True,
                                     max_window_layers=2), [None, None, 8])
        self.assertEqual(self.config(model_type="qwen2", sliding_window=8, use_sliding_window=True,
                                     max_window_layers=2, layer_types=types), [8, None, 8])
        self.assertEqual(self.config(model_type="mistral", sliding_window=8, layer_types=types), [8, None, 8])
        self.assertEqual(self.config(sliding_window=8), full)  # llama: only through layer_types
        self.assertEqual(self.config(sliding_window=8, layer_types=types), [8, None, 8])
        for bad in (dict(sliding_window=0), dict(sliding_window=8, layer_types=types[:2])):
            with self.assertRaises(ValueError):
                self.config(model_type="mistral", **bad)

    def test_mask_and_key_order(self):
        model = te.Model(self.ckpt["mistral"])
        g = torch.Generator().manual_seed(3)
        t, n, W, past = 11, 3, 4, 8  # queries at cache indices 8, 9, 10
        q, k, v = (torch.randn(1, h, m, 16, generator=g) for h, m in ((4, n), (2, t), (2, t)))
        out = model._attend(q, k, v, past, 0.25, window=W)
        for i in range(n):
            seen = [j for j in range(t) if past + i - W < j <= past + i]
            for h in range(4):
                kh, vh = k[0, h // 2, seen], v[0, h // 2, seen]
                want = torch.softmax(q[0, h, i] @ kh.T * 0.25, dim=-1) @ vh
                self.assertLess(float((out[0, h, i] - want).abs().max()), 1e-6)
        perm = torch.randperm(t, generator=g)  # the keys in another order, with their indices
        np.testing.assert_array_equal(model._attend(q, k[:, :, perm], v[:, :, perm], past, 0.25, W, perm), out)
        self.assertGreater(float((model._attend(q, k, v, past, 0.25) - out).abs().max()), 1e-3)

    def check_map(self, ring_map, fed, S):
        """The slots of a correct ring after `fed` entries: the last min(fed, S), once each."""
        self.assertEqual(sorted(p for p in ring_map if p >= 0), list(range(max(0, fed - S), fed)))

    def test_ring_equals_the_growing_cache(self):
        for arch, dtype in (("mistral", "float32"), ("qwen2", "float32"), ("mistral", "bfloat16")):
            with self.subTest(arch=arch, dtype=dtype):
                model = te.Model(self.ckpt[arch], dtype)
                windows = model.cfg.windows
                grow = te.DecodeEngine(model).run_cached(self.PROMPT, 9)
                ring = te.DecodeEngine(model, "ring_window").run_cached(self.PROMPT, 9)
                self.assertEqual(ring.requests[0]["generated"], grow.requests[0]["generated"])
                self.assertEqual(ring.layer_kinds[-1], {"kind": "sliding", "window": 6, "ring_slots": 6})
                fed = 0
                for g_, r in zip(grow.steps, ring.steps):
                    n, fed = len(r.fed_ids), fed + len(r.fed_ids)
                    np.testing.assert_array_equal(r.logits, g_.logits)
                    self.assertEqual(r.ring["cache_lengths"], [min(fed, w) if w else fed for w in windows])
                    maps = iter(r.ring["ring_positions"])
                    for l, w in enumerate(windows):
                        np.testing.assert_array_equal(r.ring["keys"][l], g_.cache_keys[l][:, -n:])
                        np.testing.assert_array_equal(r.ring["values"][l], g_.cache_values[l][:, -n:])
                        if w:  # slot s holds the record of the position its map names
                            m = list(next(maps))
                            self.check_map(m, fed, w)
                            np.testing.assert_array_equal(r.ring["contents_k"][l], g_.cache_keys[l][:, m[:min(fed, w)]])
                if dtype == "float32":
                    unc = te.DecodeEngine(model).run_uncached(self.PROMPT, 9)
                    for r, u in zip(ring.steps, unc.steps):
                        self.assertLess(np.abs(r.logits - u.logits).max(), TOL)
                full = te.Model(self.ckpt[arch], dtype)
                full.cfg.windows = [None] * 3  # the bug the mask had: full-causal past the window
                diff = [np.abs(a.logits - b.logits).max() for a, b in
                        zip(te.DecodeEngine(full).run_cached(self.PROMPT, 9).steps, grow.steps)]
                self.assertEqual([d > 1e-3 for d in diff], [False] * 3 + [True] * 6)

    def test_window_wrap_loses_a_needed_entry_at_the_first_wrap(self):
        clean = {a: te.DecodeEngine(te.Model(d), "ring_window").run_cached(self.PROMPT, 9) for a, d in self.ckpt.items()}
        for arch, layer in (("mistral", 0), ("mistral", 1), ("mistral", -1), ("qwen2", 2)):
            with self.subTest(arch=arch, layer=layer):
                model = te.Model(self.ckpt[arch])
                rings = [l for l, w in enumerate(model.cfg.windows) if w]
                bugged = rings if layer < 0 else [layer]
                run = te.DecodeEngine(model, f"window_wrap:layer={layer}").run_cached(self.PROMPT, 9)
                self.assertEqual([(i["layer"], i["step"], i["cache_index"]) for i in run.injected],
                                 [(l, 3, self.W) for l in bugged])
                fed, lost = 0, {}
                for s, c in zip(run.steps, clean[arch].steps):
                    fed += len(s.fed_ids)
                    needed = set(range(max(0, fed - (self.W - 1)), fed))
                    for j, l in enumerate(rings):
                        m = list(s.ring["ring_positions"][j])
                        if l not in bugged:
                            self.assertEqual(m, list(c.ring["ring_positions"][j]))
                        elif not needed <= set(m):
                            lost.setdefault(l, s.step)
                    worse = np.abs(s.logits - c.logits).max() > 1e-3
                    self.assertEqual(worse, s.step > 3, f"step {s.step}")  # the first wrapped step reads right
                self.assertEqual(lost, {l: 3 for l in bugged})
        with self.assertRaises(ValueError):  # Qwen2's layer 0 has no window
            te.DecodeEngine(te.Model(self.ckpt["qwen2"]), "window_wrap:layer=0").run_cached(self.PROMPT, 2)
        with self.assertRaises(ValueError):
            te.DecodeEngine(te.Model(MODELS["llama"]), "ring_window")

    def test_traces(self):
        out = self.path("ring.kvtrace")
        summary = record_run.record(self.ckpt["qwen2"], out, self.PROMPT, 8, bug="ring_window")
        t = kvtrace.read_trace(out)
        self.assertEqual(t.extra["layer_kinds"], [{"kind": "full"}] + [{"kind": "sliding", "window": 6, "ring_slots": 6}] * 2)
        self.assertFalse(t.has_snapshots())
        self.assertEqual([s.layers[1].cache_length for s in t.steps], [4, 5, 6, 6, 6, 6, 6, 6])
        self.assertEqual([s.layers[0].cache_length for s in t.steps], list(range(4, 12)))
        self.assertEqual(t.steps[4].layers[2].ring_positions, [6, 7, 2, 3, 4, 5])
        self.assertIsNone(t.steps[4].layers[0].ring_positions)
        self.assertEqual([s.chosen for s in t.steps], summary["generated"])
        record_run.record(self.ckpt["mistral"], out, self.PROMPT, 3, uncached=True)
        t = kvtrace.read_trace(out)
        self.assertEqual(t.extra["layer_kinds"], [{"kind": "sliding", "window": 6}] * 3)
        self.assertTrue(t.has_snapshots())
        record_run.record(MODELS["llama"], out, self.PROMPT, 2)
        self.assertNotIn("layer_kinds", kvtrace.read_trace(out).extra)


class TraceTest(_Temp):
    def test_written_trace_reads_back(self):
        out = self.path("clean.kvtrace")
        s = record_run.record(MODELS["llama"], out, PROMPT["llama"], 5, dtype="bfloat16")
        t = kvtrace.read_trace(out)
        self.assertEqual((t.mode, t.engine, len(t.steps)), ("cached", "torch_engine.py", 5))
        m = t.model
        self.assertEqual((m["architecture"], m["num_layers"], m["num_heads"], m["num_kv_heads"], m["head_dim"],
                          m["vocab_size"], m["compute_dtype"], m["stored_dtype"]),
                         ("llama", 3, 4, 2, 16, 1200, "bfloat16", "F32"))
        self.assertEqual(m["fingerprint"], kvtrace.model_fingerprint(MODELS["llama"]))
        self.assertEqual(t.requests[0]["generated"], s["generated"])
        self.assertEqual(t.requests[0]["policy"]["temperature"], 0.0)
        P = len(PROMPT["llama"])
        self.assertEqual([st.layers[0].cache_length for st in t.steps], [P + i for i in range(5)])
        self.assertEqual([st.layers[0].keys.shape[1] for st in t.steps], [P, 1, 1, 1, 1])
        self.assertTrue(t.has_snapshots())
        self.assertEqual([st.chosen for st in t.steps], s["generated"])

    def test_uncached_and_two_request_traces(self):
        out = self.path("ref.kvtrace")
        record_run.record(MODELS["gpt2"], out, PROMPT["gpt2"], 4, uncached=True, temperature=0.7, seed=5)
        t = kvtrace.read_trace(out)
        self.assertEqual(t.mode, "uncached")
        self.assertEqual(t.steps[2].fed_ids, [t.requests[0]["generated"][1]])
        self.assertEqual(t.requests[0]["policy"]["generator"], "torch")
        out = self.path("cross.kvtrace")
        s = record_run.record(MODELS["gpt2"], out, PROMPT["gpt2"], 6, bug="cross_request:step=3")
        t = kvtrace.read_trace(out)
        self.assertEqual([r["id"] for r in t.requests], [0, 1])
        self.assertEqual([(st.request, st.tick, st.slot) for st in t.steps][2:5], [(0, 2, 0), (1, 3, 0), (0, 4, 0)])
        self.assertEqual(s["injected"][0]["bug"], "cross_request")
        out = self.path("stale.kvtrace")
        record_run.record(MODELS["gpt2"], out, PROMPT["gpt2"], 6, bug="stale_cache:step=3",
                          second_model=os.path.join(HF, "models", "gpt2-updated"))
        t = kvtrace.read_trace(out)
        self.assertEqual([st.weights_version for st in t.steps], [0, 0, 0, 1, 1, 1])

    def test_command_line(self):
        out = self.path("cli.kvtrace")
        ids = ",".join(map(str, PROMPT["gpt2"]))
        p = subprocess.run([sys.executable, os.path.join(HERE, "record_run.py"), "--model", MODELS["gpt2"],
                            "--prompt-ids", ids, "--max-new", "3", "--bug", "wrong_position:offset=-1",
                            "--out", out], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        summary = json.loads(p.stdout)
        self.assertEqual(len(summary["generated"]), 3)
        self.assertEqual(len(kvtrace.read_trace(out).steps), 3)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = record_run.main(["--model", MODELS["gpt2"], "--prompt-ids", ids, "--max-new", "2",
                                  "--bug", "bogus", "--out", self.path("x.kvtrace")])
        self.assertEqual(rc, 2)
        self.assertIn("unknown bug 'bogus'", err.getvalue())


if __name__ == "__main__":
    unittest.main()
