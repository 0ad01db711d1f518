#!/usr/bin/env python3
"""A trace of some of the model's layers (docs/trace-format.md, "recorded_layers"; what
`kvscope-cli audit --minimize` writes): read, written back and refused like the C++ reader,
naming the file and the field. The shared helpers are in test_trace.py."""

import dataclasses
import json
import os
import tempfile
import unittest

import numpy as np

from kvscope_trace import trace as kvtrace
from test_trace import Errors, small_writer


def subset(layers):
    """small_writer's trace keeping the records of `layers` (model layers) only."""
    t = small_writer().to_trace()
    steps = [dataclasses.replace(s, layers=[s.layers[l] for l in layers]) for s in t.steps]
    return dataclasses.replace(t, steps=steps, recorded_layers=list(layers))


class LayerSubset(Errors, unittest.TestCase):
    def rewrite(self, name, edit_doc=None, edit_tensors=None):
        """The layers-1-and-2 subset as a file, its document edited first."""
        path = self.path(name)
        kvtrace.write_trace(subset([1, 2]), path)
        f = kvtrace._Container(path)
        doc = json.loads(f.metadata["kvtrace"])
        if edit_doc:
            edit_doc(doc)
        tensors = [(n, f.read(n), f.dtype(n)) for n in sorted(f.entries)]
        meta = dict(f.metadata, kvtrace=json.dumps(doc))
        kvtrace.write_safetensors(path, tensors, meta)
        return path

    def test_round_trip_keeps_the_layers(self):
        path = self.path("sub.kvtrace")
        kvtrace.write_trace(subset([1, 2]), path)
        t = kvtrace.read_trace(path)
        self.assertEqual(t.recorded_layers, [1, 2])
        self.assertEqual(t.stored_layers(), [1, 2])
        full = small_writer().to_trace()
        for s, f in zip(t.steps, full.steps):
            self.assertEqual(len(s.layers), 2)
            np.testing.assert_array_equal(s.layers[1].keys, f.layers[2].keys)
            self.assertEqual(s.layers[0].cache_length, f.layers[1].cache_length)
        c = kvtrace._Container(path)
        self.assertIn("layer2.k", c.entries)
        self.assertNotIn("layer0.k", c.entries)
        doc = json.loads(c.metadata["kvtrace"])
        self.assertEqual(doc["recorded_layers"], [1, 2])
        self.assertEqual(len(doc["steps"]["appended"][0]), 2)
        # A trace of every layer has no field.
        kvtrace.write_trace(full, self.path("full.kvtrace"))
        self.assertNotIn("recorded_layers",
                         json.loads(kvtrace._Container(self.path("full.kvtrace")).metadata["kvtrace"]))

    def test_bad_subsets_name_the_field(self):
        def setter(value):
            return lambda d: d.update(recorded_layers=value)
        self.assertEqual(self.field("empty.kvtrace", setter([])), "recorded_layers")
        self.assertEqual(self.field("range.kvtrace", setter([1, 3])), "recorded_layers[1]")
        self.assertEqual(self.field("order.kvtrace", setter([2, 1])), "recorded_layers[1]")
        self.assertEqual(self.field("count.kvtrace", setter([0, 1, 2])), "steps.cache_lengths[0]")
        self.assertEqual(self.field("other.kvtrace", setter([0, 1])), "layer2.k")
        self.assertEqual(self.field("absent.kvtrace", lambda d: d.pop("recorded_layers")),
                         "steps.cache_lengths[0]")


if __name__ == "__main__":
    unittest.main()


class LatentLayers(unittest.TestCase):
    """DeepSeek's latent attention: value records narrower than the keys (model.value_head_dim)
    and layer_kinds "latent" written, read back, and refused where they do not fit."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvtrace-latent-")

    def writer(self, value_width):
        from kvscope_trace import TraceWriter
        w = TraceWriter(model={"architecture": "deepseek_v3", "num_layers": 2, "num_kv_heads": 1, "head_dim": 4,
                               "value_head_dim": 2, "vocab_size": 50, "max_positions": 64})
        w.extra["layer_kinds"] = [{"kind": "latent"}, {"kind": "latent"}]
        w.add_request(0, prompt_ids=[1, 2], generated=[7], max_new_tokens=1)
        rng = np.random.default_rng(0)
        w.add_step(request=0, step=0, fed_ids=[1, 2], positions=[0, 1], chosen=7,
                   logits=np.zeros(50, np.float32),
                   keys=[rng.standard_normal((1, 2, 4)).astype(np.float32) for _ in range(2)],
                   values=[rng.standard_normal((1, 2, value_width)).astype(np.float32) for _ in range(2)])
        return w

    def test_round_trip(self):
        from kvscope_trace import read_trace
        path = os.path.join(self.dir, "latent.kvtrace")
        self.writer(2).save(path)
        t = read_trace(path)
        self.assertEqual(t.model["value_head_dim"], 2)
        self.assertEqual([k["kind"] for k in t.extra["layer_kinds"]], ["latent", "latent"])
        self.assertEqual(t.steps[0].layers[1].values.shape, (1, 2, 2))
        self.assertEqual(t.steps[0].layers[1].keys.shape, (1, 2, 4))

    def test_a_value_of_the_key_width_and_a_windowed_latent_layer_are_refused(self):
        from kvscope_trace import TraceError, read_trace
        with self.assertRaisesRegex(ValueError, r"values\[0\]"):
            self.writer(4)
        path = os.path.join(self.dir, "window.kvtrace")
        w = self.writer(2)
        w.extra["layer_kinds"][1] = {"kind": "latent", "window": 4}
        with self.assertRaises((TraceError, ValueError)) as e:
            w.save(path)
            read_trace(path)
        self.assertIn("layer_kinds[1].window", str(e.exception))

    def test_decompressed_heads_say_so_and_another_layout_is_refused(self):
        from kvscope_trace import TraceError, read_trace
        w = self.writer(2)
        w.model["latent_records"] = "heads"  # transformers 4.x: each head's decompressed K and V
        path = os.path.join(self.dir, "heads.kvtrace")
        w.save(path)
        self.assertEqual(read_trace(path).model["latent_records"], "heads")
        w.model["latent_records"] = "per_head"
        bad = os.path.join(self.dir, "bad.kvtrace")
        with self.assertRaises((TraceError, ValueError)) as e:
            w.save(bad)
            read_trace(bad)
        self.assertIn("model.latent_records", str(e.exception))
