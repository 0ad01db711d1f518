"""A quantised cache in a version-2 trace: the kv_cache object (docs/trace-format.md
"Quantised caches") written, read back unchanged, and refused with the field named when
it is malformed, like the C++ reader."""

import os
import tempfile
import unittest

import numpy as np

from kvscope_trace import TraceError, TraceWriter, read_trace, write_trace
from kvscope_trace.cli import info

MODEL = {"architecture": "llama", "num_layers": 2, "num_kv_heads": 1, "head_dim": 4,
         "vocab_size": 50, "max_positions": 64}


def writer(kv_cache):
    w = TraceWriter(model=dict(MODEL))
    w.add_request(0, prompt_ids=[1, 2, 3], generated=[7], max_new_tokens=1)
    rng = np.random.default_rng(0)
    k = [rng.standard_normal((1, 3, 4)).astype(np.float32) for _ in range(2)]
    v = [rng.standard_normal((1, 3, 4)).astype(np.float32) for _ in range(2)]
    w.add_step(request=0, step=0, fed_ids=[1, 2, 3], positions=[0, 1, 2], chosen=7,
               logits=np.zeros(50, np.float32), keys=k, values=v)
    if kv_cache is not None:
        w.extra["kv_cache"] = kv_cache
    return w


class KvCacheField(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvtrace-kvcache-")

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_round_trip_keeps_the_declared_cache(self):
        for kv in ({"dtype": "fp8_e4m3", "scale": "per_token_head"},
                   {"dtype": "int8", "scale": "per_layer", "k_scales": [0.1, 0.2], "v_scales": [0.3, 0.4]}):
            writer(kv).save(self.path("a.kvtrace"))
            t = read_trace(self.path("a.kvtrace"))
            self.assertEqual(t.extra["kv_cache"], kv)
            self.assertIn(f"kv cache: {kv['dtype']}", info(t, "a.kvtrace"))
            write_trace(t, self.path("b.kvtrace"))
            self.assertEqual(read_trace(self.path("b.kvtrace")).extra["kv_cache"], kv)
            os.remove(self.path("a.kvtrace"))
            os.remove(self.path("b.kvtrace"))
        writer(None).save(self.path("plain.kvtrace"))
        self.assertNotIn("kv_cache", read_trace(self.path("plain.kvtrace")).extra)

    def test_malformed_fields_are_named(self):
        cases = {
            "kv_cache.dtype": {"dtype": "int4"},
            "kv_cache": 8,
            "kv_cache.scale": {"dtype": "int8", "scale": "per_channel"},
            "kv_cache.k_scales": {"dtype": "int8", "scale": "per_layer", "k_scales": [0.1], "v_scales": [0.1, 0.1]},
            "kv_cache.v_scales": {"dtype": "int8", "scale": "per_layer", "k_scales": [0.1, 0.1], "v_scales": [0.1, -1]},
        }
        for i, (field, kv) in enumerate(cases.items()):
            with self.subTest(field=field):
                path = self.path(f"bad{i}.kvtrace")
                writer(kv).save(path)
                with self.assertRaises(TraceError) as e:
                    read_trace(path)
                self.assertEqual(e.exception.field, field)


if __name__ == "__main__":
    unittest.main()
