"""Tests of the independent engine's prefix cache (prefix_cache.py): a correct hit gives the
very records and logits of prefilling the whole prompt (float32), the trace records the hit
as docs/trace-format.md says, and prefix_reuse hands over another prompt's rows from the
block's last token on (every layer, or the one layer of its block table).

    /usr/bin/python3 -m unittest discover -s tests/independent -p "test_*.py"
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the interpreter
    if os.environ.get("CI"):
        raise
    raise unittest.SkipTest(f"the independent engine needs numpy and torch ({e})")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(REPO, "python"))
import kvscope_trace as kvtrace  # noqa: E402
import prefix_cache as pc  # noqa: E402
import torch_engine as te  # noqa: E402

MODELS = {n: os.path.join(REPO, "tests", "fixtures", "hf", "models", n) for n in ("gpt2", "llama")}
PROMPT = [33, 85, 68, 300, 290, 926, 995, 302, 434, 847, 275, 768, 89, 978, 14]


EXACT = []  # (model, reused, logits bit-exact?) printed at the end

# Computed rows and logits vs the whole prefill: float32 rounding, relative to the array's
# largest entry. A product of fewer rows may round otherwise (the BLAS picks its kernel by
# shape); measured worst over 3 layers and the head: 9.0e-7 of the logits' largest with
# OpenBLAS's SkylakeX kernels, 2.1e-6 with Haswell's and Zen's, 0 with Prescott's. A wrong
# row moves them by more than 1e-3 (asserted below).
ROUNDING = 1e-5


def tearDownModule():
    if EXACT:
        print("\nprefix-cache hits vs the whole prefill, logits bit-exact: " +
              ", ".join(f"{m} hit {n}: {'yes' if e else 'no (float32 rounding)'}" for m, n, e in EXACT))


def differing_at(p, token=500):
    other = list(PROMPT)
    other[p] = token
    return other


class PrefixCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.models = {n: te.Model(d, "float32") for n, d in MODELS.items()}

    def test_parse(self):
        self.assertEqual(pc.parse_prefix("prefix_reuse:block=2,layer=1"), {"name": "prefix_reuse", "block": 2, "layer": 1})
        self.assertEqual(pc.parse_prefix("prefix_cache"), {"name": "prefix_cache", "block": 4})
        for bad in ("prefix_cache:layer=1", "prefix_cache:block=0", "prefix_reuse:block=x", "prefix_cache:block"):
            with self.assertRaises(ValueError):
                pc.parse_prefix(bad)

    def test_lookup_whole_blocks_and_the_last_token(self):
        store = pc.PrefixStore(4)
        cache = te.KVCache(1)
        cache.keys = cache.values = [torch.zeros(1, 1, 15, 2)]
        store.keep(0, PROMPT, cache)
        self.assertEqual(store.lookup(differing_at(11))[0], 8)
        self.assertEqual(store.lookup(differing_at(6))[0], 4)
        self.assertEqual(store.lookup(differing_at(0))[0], 0)
        self.assertEqual(store.lookup(PROMPT[:12])[0], 8)      # the last token is computed
        self.assertEqual(store.lookup(PROMPT[:13])[0], 12)
        self.assertEqual(store.lookup(differing_at(11), short=True)[0], 12)  # the bug's lookup
        self.assertEqual(store.lookup(differing_at(10), short=True)[0], 8)
        a, b = store.lookup(PROMPT)[2], store.lookup(differing_at(11))[2]
        self.assertEqual(a[:2], b)      # chained block hashes
        self.assertNotEqual(store.lookup(PROMPT, short=True)[2], a)  # the bug hashes fewer tokens

    def test_correct_hit_is_the_whole_prefill(self):
        """float32: the hit request's steps have the cache and the logits of the same prompt
        prefilled whole (DecodeEngine.run_cached): the reused rows bit for bit (computed by a
        prefill of the same length over the same prefix), the rows and logits the hit step
        computed over them within float32 rounding (a matmul of fewer rows may round
        otherwise), and the same tokens."""
        for name, model in self.models.items():
            for p, reused in ((11, 8), (7, 4), (14, 12)):
                with self.subTest(model=name, differing=p):
                    other = differing_at(p)
                    run = pc.run_prefix(model, [PROMPT, other], 3, "prefix_cache:block=4")
                    whole = te.DecodeEngine(model).run_cached(other, 3)
                    hit = [s for s in run.steps if s.request == 1]
                    self.assertEqual((hit[0].reused_count, hit[0].reused_from), (reused, 0))
                    self.assertEqual(hit[0].fed_ids, other[reused:])
                    self.assertEqual(hit[0].positions, list(range(reused, 15)))
                    self.assertEqual(run.requests[1]["generated"], whole.requests[0]["generated"])
                    for s, w in zip(hit, whole.steps):
                        scale = float(np.abs(w.logits).max())
                        np.testing.assert_allclose(s.logits, w.logits, rtol=0, atol=ROUNDING * scale)
                        for a, b in zip(s.cache_keys + s.cache_values, w.cache_keys + w.cache_values):
                            self.assertEqual(a.shape, b.shape)
                            np.testing.assert_array_equal(a[:, :reused], b[:, :reused])
                            np.testing.assert_allclose(a, b, rtol=0, atol=ROUNDING * float(np.abs(b).max()))
                    self.assertEqual(run.steps[0].reused_count, 0)  # request 0 had nothing to reuse
                    exact = all(np.array_equal(s.logits, w.logits) for s, w in zip(hit, whole.steps))
                    EXACT.append((name, reused, exact))

    def test_prefix_reuse_hands_over_the_other_prompts_rows(self):
        """The bug: a prompt differing only at a block's last token p gets the kept prompt's
        rows from p on (all 12 whole-block rows reused); they equal request 0's rows there and
        differ from its own rows at p. layer=L: only layer L's rows do, the others are right.

        Bit for bit where the engine copies rows (request 0's, from a prefill of the same 15
        rows as the whole prefill): the wrong layers' 12 rows, the other layers' R rightly
        matched ones (R = the blocks before p's). The other layers' rows from R on are computed
        (the span R..12 over the cache, then the hit step's 3 rows): they equal the whole
        prefill within float32 rounding (ROUNDING) only, as in the test above; a BLAS may
        round a row of a product of fewer rows otherwise (OpenBLAS's SkylakeX kernels take
        products of M*N <= 1200 to a small-matrix kernel: llama's 64 -> 128 MLP projections
        of 4 or 8 rows round otherwise than of 15; its Prescott kernels happen not to)."""
        for name, model in self.models.items():
            L = model.cfg.num_layers
            for p in (3, 7, 11):  # the end of block 0 (no right hit at all), 1, 2
                other = differing_at(p)
                right_n = p - p % 4  # the whole blocks before p's: rightly matched
                whole = te.DecodeEngine(model).run_cached(other, 2)
                for layer in (-1, 0, 1, L - 1):
                    with self.subTest(model=name, differing=p, layer=layer):
                        run = pc.run_prefix(model, [PROMPT, other], 2, f"prefix_reuse:block=4,layer={layer}")
                        (acted,) = [i for i in run.injected if i["bug"] == "prefix_reuse"]
                        self.assertEqual((acted["request"], acted["source"], acted["position"], acted["layer"],
                                          acted["reused"], acted["right_reused"]),
                                         (1, 0, p, max(layer, 0), 12, right_n))
                        src, hit = run.steps[0], next(s for s in run.steps if s.request == 1)
                        self.assertEqual((hit.reused_count, hit.reused_from), (12, 0))
                        self.assertEqual(hit.fed_ids, other[12:])
                        for l in range(L):
                            wrong = layer < 0 or l == layer
                            copied = 12 if wrong else right_n  # rows copied from request 0's
                            for mine, kept, right in ((hit.cache_keys[l], src.cache_keys[l], whole.steps[0].cache_keys[l]),
                                                      (hit.cache_values[l], src.cache_values[l], whole.steps[0].cache_values[l])):
                                np.testing.assert_array_equal(mine[:, :copied], kept[:, :copied])
                                shared = min(p, copied)  # the shared prefix, copied: the right rows
                                np.testing.assert_array_equal(mine[:, :shared], right[:, :shared])
                                tol = ROUNDING * float(np.abs(right).max())
                                if wrong:
                                    self.assertGreater(float(np.abs(mine[:, p] - right[:, p]).max()), 1e-3)
                                elif l < layer:  # before the wrong layer: all right (computed rows rounded)
                                    np.testing.assert_allclose(mine, right, rtol=0, atol=tol)
                                else:  # computed, the span right, the hit step over layer `layer`'s wrong rows
                                    np.testing.assert_allclose(mine[:, :12], right[:, :12], rtol=0, atol=tol)
                        if layer < 0 or layer == 0:  # token p's own record at layer 0 is another token's
                            self.assertFalse(np.array_equal(hit.cache_keys[0][:, p], whole.steps[0].cache_keys[0][:, p]))

    def test_no_wrong_block_when_no_block_ends_differently(self):
        model = self.models["gpt2"]
        other = differing_at(9)  # inside block 2: the short lookup stops there too
        run = pc.run_prefix(model, [PROMPT, other], 2, "prefix_reuse:block=4,layer=-1")
        self.assertEqual([i["step"] for i in run.injected if i["bug"] == "prefix_reuse"], [None])
        self.assertEqual(run.steps[2].reused_count, 8)
        with self.assertRaises(ValueError):
            pc.run_prefix(model, [PROMPT, other], 2, "prefix_reuse:layer=3")

    def test_trace_records_the_hit(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "hit.kvtrace")
            info = pc.record_prefix(MODELS["llama"], out, [PROMPT, differing_at(11)], 3, spec="prefix_cache:block=4")
            self.assertEqual(info["hits"], {1: (8, 0)})
            t = kvtrace.read_trace(out)
            hit = next(s for s in t.steps if s.request == 1 and s.step == 0)
            self.assertEqual((hit.reused_count, hit.reused_from, len(hit.reused_blocks)), (8, 0, 2))
            self.assertEqual(hit.positions, list(range(8, 15)))
            for rec in hit.layers:  # records: the 8 reused rows, then the 7 fed tokens'
                self.assertEqual((rec.keys.shape[1], rec.cache_length), (15, 15))
            self.assertEqual([r.cache_length for r in t.steps_of(1)[1].layers], [16] * 3)
            self.assertEqual([s.reused_count for s in t.steps if s is not hit], [0] * (len(t.steps) - 1))
            ref = os.path.join(tmp, "ref.kvtrace")
            pc.record_uncached(MODELS["llama"], ref, [PROMPT, differing_at(11)], 3)
            u = kvtrace.read_trace(ref)
            self.assertEqual([r["generated"] for r in u.requests], [r["generated"] for r in t.requests])
            self.assertEqual([s.reused_count for s in u.steps], [0] * 6)


class BlasKernelsTest(unittest.TestCase):
    """PrefixCacheTest under each OpenBLAS kernel family this CPU runs (OPENBLAS_CORETYPE in
    a child): its bit-for-bit claims must not hang on the kernels the BLAS picks (OpenBLAS
    picks by CPU model; a machine it does not know runs Prescott's)."""

    def test_prefix_cache_under_other_openblas_kernels(self):
        if os.environ.get("KVSCOPE_CORETYPE_CHILD"):
            self.skipTest("the child run itself")
        with open("/proc/self/maps") as f:
            if "openblas" not in f.read():
                self.skipTest("not checked: torch does not run on OpenBLAS here")
        try:
            with open("/proc/cpuinfo") as f:
                flags = set(next((l for l in f if l.startswith("flags")), "").split())
        except OSError:
            flags = set()
        if "sse3" not in flags and "pni" not in flags:
            self.skipTest("not checked: not an x86-64 CPU with SSE3 (/proc/cpuinfo)")
        cores = ["Prescott"]
        if {"avx2", "fma"} <= flags:
            cores.append("Haswell")
        if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
            cores.append("SkylakeX")
        for core in cores:
            with self.subTest(openblas_coretype=core):
                env = dict(os.environ, OPENBLAS_CORETYPE=core, KVSCOPE_CORETYPE_CHILD="1")
                p = subprocess.run([sys.executable, "-m", "unittest", "test_prefix_cache.PrefixCacheTest"],
                                   cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
                self.assertEqual(p.returncode, 0, f"OPENBLAS_CORETYPE={core}:\n{p.stderr[-3000:]}")


if __name__ == "__main__":
    unittest.main()
