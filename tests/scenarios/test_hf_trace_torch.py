"""kvscope_trace.hf_trace on real torch tensors: its cache adapter (transformers 5 `cache.layers`,
transformers 4 `key_cache`/`value_cache`, legacy tuples; float32 and bfloat16 tensors) and
its decode loop, driven by the independent PyTorch engine as the model, recorded and then
audited by kvscope-cli. A clean run must audit clean, and a sampled run (KV Scope's
generator, which kvscope_trace.hf_trace uses) must replay from its seed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(REPO, "python"))  # kvscope_trace: installed, else the source
sys.path.insert(0, os.path.join(REPO, "tests", "independent"))
import foreign_runs as fr  # noqa: E402

try:
    import torch
    from kvscope_trace import hf_trace
    from torch_model import KVCache, Model
except ImportError:
    if os.environ.get("CI"):  # CI installs python3-torch (scripts/setup.sh)
        raise
    raise unittest.SkipTest("needs numpy and torch (run with /usr/bin/python3)")

MODELS = os.path.join(REPO, "tests", "fixtures", "hf", "models")
PROMPT = [0, 34, 86, 69, 301, 291, 938, 1014, 303, 435, 856, 276, 781, 90, 996, 15]


class _Layer:
    """One layer of a transformers 5 cache (`DynamicLayer`: .keys / .values)."""

    def __init__(self, cache: KVCache, i: int):
        self._cache, self._i = cache, i

    @property
    def keys(self):
        return self._cache.keys[self._i]

    @property
    def values(self):
        return self._cache.values[self._i]


class Transformers5Cache(KVCache):
    """The transformers 5 (and 4.56+) layout: cache.layers[i].keys / .values."""

    @property
    def layers(self):
        return [_Layer(self, i) for i in range(self.num_layers)]


class Transformers4Cache:
    """The transformers 4 DynamicCache layout: key_cache[i] / value_cache[i]."""

    def __init__(self, inner: KVCache):
        self.inner = inner

    @property
    def key_cache(self):
        return self.inner.keys

    @property
    def value_cache(self):
        return self.inner.values


def forward_for(model: Model, style: str):
    """hf_trace's forward(ids, positions, cache) -> (last logits row, cache) over the
    independent engine, handing back the cache in one of transformers' layouts."""
    L = model.cfg.num_layers
    inner = {}

    def forward(ids, positions, cache):
        if cache is None:
            store = Transformers5Cache(L) if style == "transformers5" else KVCache(L)
        else:
            store = cache if style == "transformers5" else inner["store"]
        logits = model.forward(list(ids), list(positions), store)
        inner["store"] = store
        if style == "transformers5":
            out = store
        elif style == "transformers4":
            out = Transformers4Cache(store)
        else:  # legacy tuple of (key, value) pairs
            out = tuple((store.keys[i], store.values[i]) for i in range(L))
        return logits[-1], out

    return forward


@unittest.skipUnless(os.path.exists(fr.cli_path()) or os.environ.get("CI"), "kvscope-cli is not built")
class HfTraceOnTorchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvscope-hftrace-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_cache_adapter_reads_every_layout(self):
        model = Model(os.path.join(MODELS, "llama"), "bfloat16")
        for style in ("transformers5", "transformers4", "legacy"):
            with self.subTest(style=style):
                _, cache = forward_for(model, style)(PROMPT, list(range(len(PROMPT))), None)
                layers = hf_trace.cache_layers(cache)
                self.assertEqual(len(layers), model.cfg.num_layers)
                k, v = layers[1]
                self.assertIsInstance(k, torch.Tensor)
                self.assertEqual(k.dtype, torch.bfloat16)
                self.assertEqual(hf_trace.cache_length(cache), len(PROMPT))
                row = hf_trace.cache_row(k)
                self.assertEqual(row.dtype.name, "float32")
                self.assertEqual(list(row.shape), [model.cfg.num_kv_heads, len(PROMPT), model.cfg.head_dim])
                self.assertTrue((row == k[0].float().numpy()).all())
                k[0, 0, 0, 0] = 1000.0  # an in-place update later must not reach the copy
                self.assertNotEqual(row[0, 0, 0], 1000.0)

    def _record(self, style, dtype, policy):
        model = Model(os.path.join(MODELS, "llama"), dtype)
        import kvscope_trace as kvtrace
        d = os.path.join(MODELS, "llama")
        info = model.model_info(fingerprint=kvtrace.model_fingerprint(d), stored_dtype=kvtrace.model_stored_dtype(d))
        rec = hf_trace.TraceRecorder(info)
        hf_trace.decode(forward_for(model, style), rec, 0, PROMPT, 8, policy=policy, max_positions=model.cfg.max_positions)
        out = os.path.join(self.tmp, f"{style}.{dtype}.kvtrace")
        rec.save(out)
        return out

    def test_recorded_runs_audit_clean(self):
        for style, dtype in (("transformers5", "float32"), ("transformers4", "bfloat16"), ("legacy", "float32")):
            with self.subTest(style=style, dtype=dtype):
                out = fr.audit(self._record(style, dtype, None), model=os.path.join(MODELS, "llama"))
                self.assertEqual(out.problems(fr.Expectation([])), [])
                self.assertEqual(out.report["dtype"], dtype)

    def test_sampled_run_replays_from_its_seed(self):
        policy = {"temperature": 0.9, "seed": 11}  # hf_trace names its generator itself
        out = fr.audit(self._record("transformers5", "float32", policy), model=os.path.join(MODELS, "llama"))
        self.assertEqual(out.problems(fr.Expectation([])), [])
        checks = next(s for s in out.report["stages"] if s["id"] == "policy")["checks"]
        self.assertTrue(any("reproduces every sampled token" in c for c in checks), checks)


if __name__ == "__main__":
    unittest.main()
