#!/usr/bin/env python3
"""Sliding-window layers and ring caches in a version-2 trace (docs/trace-format.md,
"Sliding-window layers and ring caches"): the layer_kinds field and the ring_positions slot
maps (steps.ring_row) written, read back onto the ring layers' records, written again
unchanged, left out entirely when a trace has no maps, and refused like the C++ reader,
naming the file and the field. small_writer (a trace without
them) is test_trace.py's."""

import json
import os
import unittest

import numpy as np

from kvscope_trace import trace as kvtrace
from kvscope_trace.cli import info
from test_trace import TempDir, small_writer

MODEL = {"architecture": "mistral", "num_layers": 4, "num_heads": 2, "num_kv_heads": 1,
         "head_dim": 4, "vocab_size": 50, "max_positions": 64}
S = 4
KINDS = [{"kind": "sliding", "window": S, "ring_slots": S}] * 3 + [{"kind": "full"}]
PROMPT, GENERATED = [3, 4, 5], [6, 7, 8, 9, 10]


def ring_writer(kinds=KINDS, maps=True, recorded=None):
    """Prompt of 3, then 4 decode steps: the ring of 4 slots wraps at step 2 (entry 4). Ring
    layers hold slot c % S for entry c; step k's map of layer j is offset by j so that the
    maps of the layers differ."""
    rng = np.random.default_rng(1)
    w = kvtrace.TraceWriter(dict(MODEL))
    w.extra["layer_kinds"] = [dict(k) for k in kinds]
    w.recorded_layers = recorded
    layers = recorded if recorded is not None else list(range(MODEL["num_layers"]))
    rings = [l for l in layers if kinds[l].get("ring_slots")]
    w.add_request(0, prompt_ids=PROMPT, generated=GENERATED[:4], max_new_tokens=4)
    held, fed = [-1] * S, 0
    for step in range(4):
        ids = PROMPT if step == 0 else [GENERATED[step - 1]]
        pos = list(range(fed, fed + len(ids)))
        for c in pos:
            held[c % S] = c
        fed += len(ids)
        lengths = [min(fed, S) if l in rings else fed for l in layers]
        k = [rng.standard_normal((1, len(ids), 4)).astype(np.float32) for _ in layers]
        v = [rng.standard_normal((1, len(ids), 4)).astype(np.float32) for _ in layers]
        ring = [[p + j if p >= 0 else -1 for p in held] for j in range(len(rings))] if maps else None
        w.add_step(request=0, step=step, fed_ids=ids, positions=pos, chosen=GENERATED[step],
                   logits=rng.standard_normal(50).astype(np.float32), keys=k, values=v,
                   cache_lengths=lengths, ring_positions=ring)
    return w


class RingTrace(TempDir, unittest.TestCase):
    def field(self, name, edit_doc=None, edit_tensors=None, **kw):
        path = self.rewrite(name, edit_doc, edit_tensors, **kw)
        with self.assertRaises(kvtrace.TraceError) as cm:
            kvtrace.read_trace(path)
        self.assertEqual(cm.exception.file, path)
        return cm.exception.field

    def rewrite(self, name, edit_doc=None, edit_tensors=None, **kw):
        """ring_writer's trace as a file, its document and tensors edited first."""
        path = self.path(name)
        ring_writer(**kw).save(path)
        f = kvtrace._Container(path)
        doc = json.loads(f.metadata["kvtrace"])
        if edit_doc:
            edit_doc(doc)
        tensors = {n: (f.read(n), f.dtype(n)) for n in sorted(f.entries)}
        if edit_tensors:
            edit_tensors(tensors)
        meta = dict(f.metadata, kvtrace=json.dumps(doc))
        kvtrace.write_safetensors(path, [(n, a, d) for n, (a, d) in tensors.items()], meta)
        return path

    def test_round_trip_puts_the_maps_on_the_ring_layers(self):
        path = self.path("ring.kvtrace")
        ring_writer().save(path)
        t = kvtrace.read_trace(path)
        self.assertEqual(t.extra["layer_kinds"], KINDS)
        maps = [[rec.ring_positions for rec in s.layers] for s in t.steps]
        self.assertEqual(maps[0], [[0, 1, 2, -1], [1, 2, 3, -1], [2, 3, 4, -1], None])
        self.assertEqual(maps[2], [[4, 1, 2, 3], [5, 2, 3, 4], [6, 3, 4, 5], None])  # wrapped
        self.assertEqual(maps[3][0], [4, 5, 2, 3])
        self.assertEqual([s.layers[0].cache_length for s in t.steps], [3, 4, 4, 4])
        self.assertEqual([s.layers[3].cache_length for s in t.steps], [3, 4, 5, 6])
        f = kvtrace._Container(path)
        self.assertEqual((f.dtype("ring_positions"), list(f.shape("ring_positions"))), ("I32", [4, 3, S]))
        self.assertEqual(json.loads(f.metadata["kvtrace"])["steps"]["ring_row"], [0, 1, 2, 3])
        again = self.path("again.kvtrace")
        kvtrace.write_trace(t, again)
        with open(path, "rb") as a, open(again, "rb") as b:
            self.assertEqual(a.read(), b.read())
        text = info(t, path)
        self.assertIn("layer kinds: sliding window 4 on layers 0-2, ring of 4 slots; full on layer 3", text)
        self.assertIn("ring slot maps on 4 steps", text)

    def test_a_subset_maps_its_own_ring_layers(self):
        path = self.path("sub.kvtrace")
        ring_writer(recorded=[1, 3]).save(path)
        t = kvtrace.read_trace(path)
        self.assertEqual(list(kvtrace._Container(path).shape("ring_positions")), [4, 1, S])
        self.assertEqual([rec.ring_positions for rec in t.steps[2].layers], [[4, 1, 2, 3], None])

    def test_traces_without_maps_are_unchanged(self):
        for name, w in (("plain", small_writer()), ("no maps", ring_writer(maps=False)),
                        ("sliding, no ring", ring_writer([{"kind": "sliding", "window": 3}] * 4, maps=False))):
            with self.subTest(name):
                path = self.path(name.replace(" ", "_").replace(",", "") + ".kvtrace")
                w.save(path)
                f = kvtrace._Container(path)
                self.assertNotIn("ring_positions", f)
                self.assertNotIn("ring_row", json.loads(f.metadata["kvtrace"])["steps"])
                self.assertTrue(all(rec.ring_positions is None for s in kvtrace.read_trace(path).steps
                                    for rec in s.layers))
        plain = kvtrace.read_trace(self.path("plain.kvtrace"))
        self.assertNotIn("layer_kinds", plain.extra)
        self.assertNotIn("layer kinds", info(plain))
        self.assertIn("sliding window 3 on layers 0-3", info(kvtrace.read_trace(self.path("sliding_no_ring.kvtrace"))))

    def test_chunked_layers_round_trip(self):
        """Llama 4's chunked layers, as kvscope-record writes transformers' (a ring of chunk - 1)."""
        kinds = [{"kind": "chunked", "chunk": 4, "ring_slots": 3}, {"kind": "full"}] * 2
        path = self.path("chunked.kvtrace")
        ring_writer(kinds, maps=False).save(path)
        t = kvtrace.read_trace(path)
        self.assertEqual(t.extra["layer_kinds"], kinds)
        self.assertIn("chunks of 4 on layers 0, 2, ring of 3 slots; full on layers 1, 3", info(t))

    def test_malformed_layer_kinds_are_named(self):
        def kinds(edit):
            def f(d):
                edit(d["layer_kinds"])
            return f
        cases = {
            "not an array": ("layer_kinds", lambda d: d.update(layer_kinds={"kind": "full"})),
            "one entry short": ("layer_kinds", kinds(lambda k: k.pop())),
            "an entry not an object": ("layer_kinds[1]", kinds(lambda k: k.__setitem__(1, "sliding"))),
            "unknown kind": ("layer_kinds[2].kind", kinds(lambda k: k[2].update(kind="local"))),
            "chunk missing": ("layer_kinds[2].chunk", kinds(lambda k: k[2].update(kind="chunked"))),
            "chunk zero": ("layer_kinds[0].chunk", kinds(lambda k: k[0].update(kind="chunked", chunk=0))),
            "window missing": ("layer_kinds[2].window", kinds(lambda k: k[2].pop("window"))),
            "window zero": ("layer_kinds[2].window", kinds(lambda k: k[2].update(window=0))),
            "window not an integer": ("layer_kinds[1].window", kinds(lambda k: k[1].update(window=4.5))),
            "window too large": ("layer_kinds[0].window", kinds(lambda k: k[0].update(window=1 << 29))),
            "ring on a full layer": ("layer_kinds[3].ring_slots", kinds(lambda k: k[3].update(ring_slots=4))),
            "ring not positive": ("layer_kinds[0].ring_slots", kinds(lambda k: k[0].update(ring_slots=0))),
            "rings of two sizes": ("layer_kinds[1].ring_slots", kinds(lambda k: k[1].update(ring_slots=5))),
        }
        for i, (what, (field, edit)) in enumerate(cases.items()):
            with self.subTest(what):
                self.assertEqual(self.field(f"kinds{i}.kvtrace", edit), field)

    def test_malformed_ring_maps_are_named(self):
        def tensor(array=None, dtype=None):
            def f(t):
                a, d = t["ring_positions"]
                t["ring_positions"] = (a if array is None else array(a), dtype or d)
            return f

        def column(value, at=2):
            def f(d):
                d["steps"]["ring_row"][at] = value
            return f

        def no_rings(d):
            for k in d["layer_kinds"]:
                k.pop("ring_slots", None)
        cases = {
            "I64 maps": ("ring_positions", None, tensor(lambda a: a.astype(np.int64), "I64")),
            "F32 maps": ("ring_positions", None, tensor(lambda a: a.astype(np.float32), "F32")),
            "two layers": ("ring_positions", None, tensor(lambda a: np.ascontiguousarray(a[:, :2]))),
            "five slots": ("ring_positions", None,
                           tensor(lambda a: np.concatenate([a, a[:, :, :1]], axis=2))),
            "no rows axis": ("ring_positions", None, tensor(lambda a: np.ascontiguousarray(a[0]))),
            "a position below -1": ("ring_positions", None, tensor(lambda a: np.where(a == 2, -5, a).astype(np.int32))),
            "row past the end": ("steps.ring_row[2]", column(4), None),
            "row below -1": ("steps.ring_row[2]", column(-2), None),
            "row not an integer": ("steps.ring_row[1]", column("0", at=1), None),
            "maps without ring layers": ("ring_positions", no_rings, None),
            "rows without the tensor": ("ring_positions", None, lambda t: t.pop("ring_positions")),
        }
        for i, (what, (field, doc, tensors)) in enumerate(cases.items()):
            with self.subTest(what):
                self.assertEqual(self.field(f"maps{i}.kvtrace", doc, tensors), field)

    def test_the_writer_refuses_maps_it_cannot_place(self):
        w = ring_writer()
        k = [np.zeros((1, 1, 4), np.float32)] * 4
        step = dict(request=0, step=4, fed_ids=[10], positions=[7], keys=k, values=k)
        for maps in ([[0, 1, 2, 3]] * 2, [[0, 1, 2]] * 3, [[0.5, 1, 2, 3]] * 3, [[0, 1, 2, -4]] * 3):
            with self.subTest(maps=maps), self.assertRaises(ValueError):
                w.add_step(ring_positions=maps, **step)
        with self.assertRaises(ValueError):  # no layer data to hang the maps on
            w.add_step(request=0, step=4, fed_ids=[10], positions=[7], ring_positions=[[0] * 4] * 3)
        plain = small_writer()
        with self.assertRaises(ValueError):  # no ring layers declared
            plain.add_step(request=0, step=2, fed_ids=[1], positions=[4], keys=k[:3], values=k[:3],
                           ring_positions=[[0, 1, 2, 3]])
        t = ring_writer().to_trace()  # a step that maps only some ring layers
        t.steps[1].layers[2].ring_positions = None
        with self.assertRaises(ValueError):
            kvtrace.write_trace(t, self.path("partial.kvtrace"))
        self.assertFalse(os.path.exists(self.path("partial.kvtrace")))


if __name__ == "__main__":
    unittest.main()
