#!/usr/bin/env python3
"""Recurrent layers in a version-2 trace (layer_kinds kind "recurrent": Qwen3.5's Gated
DeltaNet layers, whose cache is a recurrent state, not K/V rows): written with no records (0
appended every step, no layer{l}.k / .v tensors, cache length 0), read back and written again
byte for byte, named by `kvtrace info`, and refused like the C++ reader where a recurrent
layer takes a window, a chunk or a ring, or holds records, naming the file and the field.

Their states after a step (steps.state_row, layer{l}.conv_state F32 [R, C, K],
layer{l}.recurrent_state F32 [R, Hv, Dk, Dv]): written, read back equal and written again
byte for byte, refused where damaged; files without states are byte for byte those of the
code before states existed (golden digests)."""

import hashlib
import json
import os
import unittest

import numpy as np

from kvscope_trace import trace as kvtrace
from kvscope_trace.cli import info
from test_trace import TempDir, WithFakeXxhash

MODEL = {"architecture": "qwen3_5_text", "num_layers": 4, "num_heads": 4, "num_kv_heads": 2,
         "head_dim": 4, "vocab_size": 50, "max_positions": 64}
H, D = 2, 4
KINDS = [{"kind": "recurrent"}, {"kind": "full"}, {"kind": "recurrent"}, {"kind": "full"}]
PROMPT, GENERATED = [3, 4, 5], [6, 7, 8]
C, K, HV, DK, DV = 6, 4, 2, 3, 5  # the states: conv [C, K], recurrent [Hv, Dk, Dv]


def state_of(request, step, layer):
    """A recognisable state pair of the step (distinct per request, step and layer)."""
    base = 1000 * request + 100 * step + 10 * layer
    conv = (base + np.arange(C * K, dtype=np.float32).reshape(C, K) / 8).astype(np.float32)
    return conv, (-base - np.arange(HV * DK * DV, dtype=np.float32).reshape(HV, DK, DV) / 16).astype(np.float32)


def recurrent_writer(snapshots=False, recorded=None, reused=0, states_at=()):
    """Prompt of 3, then 2 decode steps; the recurrent layers hold nothing, the full ones one
    record per fed token. reused: a second request whose first `reused` prompt entries came
    from the prefix cache (their rows first in the full layers' records). states_at: the
    steps (of every request) that record the recurrent layers' states (state_of)."""
    rng = np.random.default_rng(2)
    w = kvtrace.TraceWriter(dict(MODEL))
    w.extra["layer_kinds"] = [dict(k) for k in KINDS]
    w.recorded_layers = recorded
    layers = recorded if recorded is not None else list(range(MODEL["num_layers"]))
    requests = [0] + ([1] if reused else [])
    for r in requests:
        w.add_request(r, prompt_ids=PROMPT, generated=GENERATED, max_new_tokens=3)
    for r in requests:
        cache_k = {l: np.zeros((H, 0, D), np.float32) for l in layers}
        cache_v = dict(cache_k)
        fed = 0
        for step in range(3):
            ids = PROMPT[reused if r else 0:] if step == 0 else [GENERATED[step - 1]]
            start = reused if r and step == 0 else fed
            pos = list(range(start, start + len(ids)))
            rows = len(ids) + (reused if r and step == 0 else 0)
            k, v = [], []
            for l in layers:
                n = 0 if KINDS[l]["kind"] == "recurrent" else rows
                k.append(rng.standard_normal((H, n, D)).astype(np.float32))
                v.append(rng.standard_normal((H, n, D)).astype(np.float32))
                cache_k[l] = np.concatenate([cache_k[l], k[-1]], axis=1)
                cache_v[l] = np.concatenate([cache_v[l], v[-1]], axis=1)
            fed = pos[-1] + 1
            kw = {"cache_keys": [cache_k[l] for l in layers],
                  "cache_values": [cache_v[l] for l in layers]} if snapshots else {}
            if step in states_at:
                kw["states"] = {l: state_of(r, step, l) for l in layers if KINDS[l]["kind"] == "recurrent"}
            w.add_step(request=r, step=step, fed_ids=ids, positions=pos, chosen=GENERATED[step],
                       logits=rng.standard_normal(50).astype(np.float32), keys=k, values=v,
                       reused_count=reused if r and step == 0 else 0,
                       reused_from=0 if r and step == 0 else -1, **kw)
    return w


class Rewrites(TempDir):
    """recurrent_writer's file, edited, and the field the reader names."""

    def field(self, name, edit_doc=None, edit_tensors=None, **kw):
        path = self.rewrite(name, edit_doc, edit_tensors, **kw)
        with self.assertRaises(kvtrace.TraceError) as cm:
            kvtrace.read_trace(path)
        self.assertEqual(cm.exception.file, path)
        return cm.exception.field, str(cm.exception)

    def rewrite(self, name, edit_doc=None, edit_tensors=None, **kw):
        """recurrent_writer's trace as a file, its document and tensors edited first."""
        path = self.path(name)
        recurrent_writer(**kw).save(path)
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


class RecurrentLayers(Rewrites, unittest.TestCase):
    def test_round_trip_holds_no_records_on_the_recurrent_layers(self):
        for snapshots in (False, True):
            with self.subTest(snapshots=snapshots):
                path = self.path(f"recurrent{int(snapshots)}.kvtrace")
                recurrent_writer(snapshots=snapshots).save(path)
                f = kvtrace._Container(path)
                for l in (0, 2):
                    for kind in ("k", "v", "cache_k", "cache_v"):
                        self.assertNotIn(f"layer{l}.{kind}", f)
                self.assertEqual(list(f.shape("layer1.k")), [H, 5, D])
                steps = json.loads(f.metadata["kvtrace"])["steps"]
                self.assertEqual(steps["appended"], [[0, 3, 0, 3], [0, 1, 0, 1], [0, 1, 0, 1]])
                self.assertEqual(steps["cache_lengths"], [[0, 3, 0, 3], [0, 4, 0, 4], [0, 5, 0, 5]])
                t = kvtrace.read_trace(path)
                self.assertEqual(t.extra["layer_kinds"], KINDS)
                for s in t.steps:
                    for l in (0, 2):
                        self.assertEqual(s.layers[l].keys.shape, (H, 0, D))
                        self.assertEqual(s.layers[l].cache_length, 0)
                self.assertEqual([s.layers[3].cache_length for s in t.steps], [3, 4, 5])
                again = self.path(f"again{int(snapshots)}.kvtrace")
                kvtrace.write_trace(t, again)
                with open(path, "rb") as a, open(again, "rb") as b:
                    self.assertEqual(a.read(), b.read())
                self.assertIn("layer kinds: recurrent state on layers 0, 2; full on layers 1, 3", info(t, path))

    def test_a_subset_and_a_prefix_hit(self):
        path = self.path("sub.kvtrace")
        recurrent_writer(recorded=[1, 2]).save(path)
        t = kvtrace.read_trace(path)
        self.assertEqual([(s.layers[0].cache_length, s.layers[1].cache_length) for s in t.steps],
                         [(3, 0), (4, 0), (5, 0)])
        self.assertNotIn("layer2.k", kvtrace._Container(path))
        # A prefix-cache hit: its reused rows lead the full layers' records; the recurrent ones
        # hold none, and are not asked for them.
        hit = self.path("hit.kvtrace")
        recurrent_writer(reused=2).save(hit)
        t = kvtrace.read_trace(hit)
        first = next(s for s in t.steps if s.request == 1)
        self.assertEqual((first.reused_count, first.layers[1].keys.shape[1], first.layers[0].keys.shape[1]), (2, 3, 0))

    def test_a_recurrent_layer_takes_no_span_or_ring(self):
        def kinds(**extra):
            def f(d):
                d["layer_kinds"][2].update(extra)
            return f
        for name in ("window", "chunk", "ring_slots"):
            with self.subTest(name):
                field, text = self.field(f"{name}.kvtrace", kinds(**{name: 4}))
                self.assertEqual(field, f"layer_kinds[2].{name}")
                self.assertIn(f"a recurrent layer has no {name}", text)
        self.assertEqual(self.field("kind.kvtrace", kinds(kind="linear_attention"))[0], "layer_kinds[2].kind")
        path = self.rewrite("null.kvtrace", kinds(window=None))  # a null field is an absent one
        self.assertEqual(kvtrace.read_trace(path).extra["layer_kinds"][2]["window"], None)

    def test_records_on_a_recurrent_layer_are_refused(self):
        def column(name, step, layer, value):
            def f(d):
                d["steps"][name][step][layer] = value
            return f

        def tensor(name, shape):
            def f(t):
                t[name] = (np.zeros(shape, np.float32), "F32")
            return f

        def as_full(d):  # the full layers' records under a recurrent kind
            d["layer_kinds"][1] = {"kind": "recurrent"}
        cases = {
            "appended": ("steps.appended[1]", column("appended", 1, 2, 1), None),
            "cache length": ("steps.cache_lengths[2]", column("cache_lengths", 2, 0, 5), None),
            "a tensor": ("layer0.k", None, tensor("layer0.k", (H, 0, D))),
            "a snapshot": ("layer2.cache_v", None, tensor("layer2.cache_v", (H, 0, D))),
            "a full layer called recurrent": ("steps.appended[0]", as_full, None),
        }
        for i, (what, (field, doc, tensors)) in enumerate(cases.items()):
            with self.subTest(what):
                self.assertEqual(self.field(f"records{i}.kvtrace", doc, tensors)[0], field)
        self.assertEqual(self.field("snap.kvtrace", column("snapshot_lengths", 0, 0, 2), snapshots=True)[0],
                         "steps.snapshot_lengths[0]")

    def test_the_writer_refuses_records_on_a_recurrent_layer(self):
        w = recurrent_writer()
        k = [np.zeros((H, 1, D), np.float32)] * 4
        step = dict(request=0, step=3, fed_ids=[9], positions=[6])
        with self.assertRaises(ValueError):
            w.add_step(keys=k, values=k, **step)
        empty = [np.zeros((H, n, D), np.float32) for n in (0, 1, 0, 1)]
        with self.assertRaises(ValueError):
            w.add_step(keys=empty, values=empty, cache_lengths=[6, 6, 6, 6], **step)
        w.add_step(keys=empty, values=empty, cache_lengths=[0, 6, 0, 6], **step)
        t = recurrent_writer().to_trace()  # layer_kinds changed after the steps were added
        t.extra["layer_kinds"] = [{"kind": "full"}] + [{"kind": "recurrent"}] * 3
        with self.assertRaises(ValueError):
            kvtrace.write_trace(t, self.path("late.kvtrace"))
        self.assertFalse(os.path.exists(self.path("late.kvtrace")))


class RecurrentStates(Rewrites, unittest.TestCase):
    """steps.state_row and the layer{l}.conv_state / .recurrent_state tensors (F32 always)."""

    def test_states_round_trip(self):
        for dtype in ("F32", "BF16"):
            with self.subTest(dtype=dtype):
                w = recurrent_writer(states_at=(0, 2))
                w.dtype = dtype
                path = self.path(f"states-{dtype}.kvtrace")
                w.save(path)
                f = kvtrace._Container(path)
                self.assertEqual(json.loads(f.metadata["kvtrace"])["steps"]["state_row"], [0, -1, 1])
                held = sorted(n for n in f.entries if "state" in n)
                self.assertEqual(held, ["layer0.conv_state", "layer0.recurrent_state", "layer2.conv_state",
                                        "layer2.recurrent_state"])
                for l in (0, 2):
                    self.assertEqual((f.dtype(f"layer{l}.conv_state"), list(f.shape(f"layer{l}.conv_state"))),
                                     ("F32", [2, C, K]))
                    self.assertEqual((f.dtype(f"layer{l}.recurrent_state"),
                                      list(f.shape(f"layer{l}.recurrent_state"))), ("F32", [2, HV, DK, DV]))
                    np.testing.assert_array_equal(f.read(f"layer{l}.conv_state")[1], state_of(0, 2, l)[0])
                self.assertEqual(f.dtype("layer1.k"), dtype)
                t = kvtrace.read_trace(path)
                for s in t.steps:
                    for l in range(4):
                        rec = s.layers[l]
                        if l in (0, 2) and s.step != 1:
                            conv, state = state_of(0, s.step, l)
                            self.assertEqual((rec.conv_state.dtype, rec.recurrent_state.dtype),
                                             (np.float32, np.float32))
                            np.testing.assert_array_equal(rec.conv_state, conv)  # exact, even in BF16
                            np.testing.assert_array_equal(rec.recurrent_state, state)
                        else:
                            self.assertIsNone(rec.conv_state)
                            self.assertIsNone(rec.recurrent_state)
                again = self.path(f"again-{dtype}.kvtrace")
                kvtrace.write_trace(t, again, dtype=dtype)
                with open(path, "rb") as a, open(again, "rb") as b:
                    self.assertEqual(a.read(), b.read())
                self.assertIn("; recurrent states at 2 steps", info(t, path))

    def test_states_of_a_subset_and_of_two_requests(self):
        path = self.path("sub.kvtrace")
        recurrent_writer(recorded=[1, 2], states_at=(1,)).save(path)
        f = kvtrace._Container(path)
        self.assertEqual(sorted(n for n in f.entries if "state" in n), ["layer2.conv_state", "layer2.recurrent_state"])
        t = kvtrace.read_trace(path)
        self.assertEqual([s.layers[1].conv_state is not None for s in t.steps], [False, True, False])
        np.testing.assert_array_equal(t.steps[1].layers[1].recurrent_state, state_of(0, 1, 2)[1])
        self.assertIsNone(t.steps[1].layers[0].conv_state)
        # rows in step order across the requests (request 0's steps come first here)
        hit = self.path("two.kvtrace")
        recurrent_writer(reused=2, states_at=(0, 1, 2)).save(hit)
        doc = json.loads(kvtrace._Container(hit).metadata["kvtrace"])
        self.assertEqual(doc["steps"]["state_row"], list(range(6)))
        t = kvtrace.read_trace(hit)
        for s in t.steps:
            np.testing.assert_array_equal(s.layers[2].conv_state, state_of(s.request, s.step, 2)[0])
        self.assertIn("recurrent states at 6 steps", info(t, hit))
        self.assertIn("recurrent states at 0 steps", info(kvtrace.read_trace(self.rewrite("none.kvtrace")), ""))

    def test_damaged_states_are_refused(self):
        def column(value):
            def f(d):
                d["steps"]["state_row"] = value
            return f

        def drop_column(d):
            del d["steps"]["state_row"]

        def no_recurrent_layers(d):
            d["layer_kinds"] = [{"kind": "full"}] * 4

        def tensor(name, array=None, dtype="F32", drop=False, edit=None):
            def f(t):
                if drop:
                    del t[name]
                elif edit is not None:
                    t[name] = (edit(t[name][0]), dtype)
                else:
                    t[name] = (array, dtype)
            return f

        def drop_states(t):
            for n in [n for n in t if "state" in n]:
                del t[n]
        conv = np.zeros((2, C, K), np.float32)
        cases = {
            "not a list": ("steps.state_row", column(0), None),
            "one entry short": ("steps.state_row", column([0, -1]), None),
            "not an integer": ("steps.state_row[1]", column([0, "1", 1]), None),
            "below -1": ("steps.state_row[1]", column([0, -2, 1]), None),
            "outside [-1, R)": ("steps.state_row[2]", column([0, -1, 2]), None),
            "not in step order": ("steps.state_row[0]", column([1, -1, 0]), None),
            "a row twice": ("steps.state_row[2]", column([0, -1, 0]), None),
            "a state on a full layer": ("layer1.conv_state", None, tensor("layer1.conv_state", conv)),
            "a state on no layer": ("layer9.recurrent_state", None,
                                    tensor("layer9.recurrent_state", np.zeros((2, HV, DK, DV), np.float32))),
            "a missing tensor": ("layer2.recurrent_state", None, tensor("layer2.recurrent_state", drop=True)),
            "first axis is not R": ("layer0.conv_state", None, tensor("layer0.conv_state", edit=lambda a: a[:1])),
            "first axis is not R on every layer": (
                "layer2.recurrent_state", None,
                tensor("layer2.recurrent_state", edit=lambda a: np.concatenate([a, a[:1]]))),
            "shapes differ between layers": ("layer2.conv_state", None,
                                             tensor("layer2.conv_state", edit=lambda a: a[:, :, 1:])),
            "F16": ("layer0.conv_state", None, tensor("layer0.conv_state", edit=lambda a: a, dtype="F16")),
            "BF16": ("layer2.recurrent_state", None,
                     tensor("layer2.recurrent_state", edit=lambda a: a, dtype="BF16")),
            "I32": ("layer0.recurrent_state", None,
                    tensor("layer0.recurrent_state", edit=lambda a: a.astype(np.int32), dtype="I32")),
            "wrong rank": ("layer0.recurrent_state", None,
                           tensor("layer0.recurrent_state", edit=lambda a: a.reshape(2, HV, DK * DV))),
            "without a state_row column": ("layer0.conv_state", drop_column, None),
            "a null state_row column": ("layer0.conv_state", column(None), None),
            "rows without recurrent layers": ("steps.state_row[0]", no_recurrent_layers, drop_states),
        }
        for i, (what, (field, doc, tensors)) in enumerate(cases.items()):
            with self.subTest(what):
                got, text = self.field(f"states{i}.kvtrace", doc, tensors, states_at=(0, 2))
                self.assertEqual(got, field, text)
        # rows named by no step are fine where there are none: -1 everywhere, no tensors
        path = self.rewrite("empty.kvtrace", column([-1, -1, -1]), drop_states, states_at=(0, 2))
        self.assertTrue(all(l.conv_state is None for s in kvtrace.read_trace(path).steps for l in s.layers))

    def test_the_writer_refuses_bad_states(self):
        step = dict(request=0, step=3, fed_ids=[9], positions=[6])
        empty = [np.zeros((H, n, D), np.float32) for n in (0, 1, 0, 1)]
        records = dict(keys=empty, values=empty)
        good = {0: state_of(0, 3, 0), 2: state_of(0, 3, 2)}
        bad = {
            "a full layer": {**good, 1: state_of(0, 3, 1)},
            "a missing layer": {0: good[0]},
            "not a pair": {0: good[0], 2: good[2][0]},
            "a wrong rank": {0: good[0], 2: (good[2][0], good[2][1].reshape(HV, -1))},
            "another shape than before": {0: (np.zeros((C, K + 1), np.float32), good[0][1]),
                                          2: (np.zeros((C, K + 1), np.float32), good[2][1])},
            "another shape than another layer": {0: good[0], 2: (good[2][0][:, 1:], good[2][1])},
            "a layer that is not an integer": {0: good[0], "2": good[2]},
        }
        for what, states in bad.items():
            with self.subTest(what):
                w = recurrent_writer(states_at=(0,))
                with self.assertRaises(ValueError):
                    w.add_step(states=states, **records, **step)
                self.assertEqual(len(w.steps), 3)
        with self.assertRaises(ValueError):  # no layer data to hold them
            recurrent_writer().add_step(states=good, **step)
        w = recurrent_writer(states_at=(0,))
        w.add_step(states={np.int64(0): good[0], 2: good[2]}, **records, **step)  # torch-free ints too
        w.add_step(states={}, **records, **dict(step, step=4))  # {}: none at this step
        path = self.path("ok.kvtrace")
        w.save(path)
        self.assertEqual(json.loads(kvtrace._Container(path).metadata["kvtrace"])["steps"]["state_row"],
                         [0, -1, -1, 1, -1])
        # a Trace edited after the steps were added is checked when written
        def drop(s):
            s.layers[2].conv_state = s.layers[2].recurrent_state = None
        edits = {"a full layer's state": lambda s: setattr(s.layers[1], "conv_state", s.layers[0].conv_state),
                 "one recurrent layer only": drop,
                 "a conv state alone": lambda s: setattr(s.layers[2], "recurrent_state", None),
                 "another shape": lambda s: setattr(s.layers[2], "conv_state", np.zeros((C, 1), np.float32))}
        for what, edit in edits.items():
            with self.subTest(what):
                t = kvtrace.read_trace(path)
                edit(t.steps[3])
                with self.assertRaises(ValueError):
                    kvtrace.write_trace(t, self.path("late.kvtrace"))
                self.assertFalse(os.path.exists(self.path("late.kvtrace")))


def golden_writer(dtype="F32"):
    """Two requests of a 3-layer model (a sliding ring layer, experts, a padded batch row,
    explicit checksums): every optional column a trace without states can have. Its digest
    was taken with the code before recurrent layers (git HEAD of that time)."""
    model = {"architecture": "gemma2", "num_layers": 3, "num_heads": 4, "num_kv_heads": 2,
             "head_dim": 4, "vocab_size": 40, "max_positions": 64}
    rng = np.random.default_rng(7)
    w = kvtrace.TraceWriter(model, engine="golden", dtype=dtype)
    w.extra["layer_kinds"] = [{"kind": "sliding", "window": 4, "ring_slots": 4}, {"kind": "full"},
                              {"kind": "full"}]
    w.add_request(0, prompt_ids=[3, 4, 5], generated=[6, 7], max_new_tokens=2, batch_group=0)
    w.add_request(1, prompt_ids=[8, 9], generated=[10, 11], max_new_tokens=2, batch_group=0,
                  policy={"temperature": 0.7, "top_k": 5, "seed": 3})
    for step in range(2):
        for r, (ids, mask) in enumerate((([3, 4, 5], None), ([0, 8, 9], [0, 1, 1]))):
            fed = ids if step == 0 else [[6], [10]][r]
            pos = list(range(3)) if step == 0 else [3]
            n = len(fed)
            k = [rng.standard_normal((2, n, 4)).astype(np.float32) for _ in range(3)]
            v = [rng.standard_normal((2, n, 4)).astype(np.float32) for _ in range(3)]
            ring = [[0, 1, 2, -1] if step == 0 else [0, 1, 2, 3]]
            w.add_step(request=r, step=step, fed_ids=fed, positions=pos, chosen=[[6, 7], [10, 11]][r][step],
                       logits=rng.standard_normal(40).astype(np.float32), keys=k, values=v,
                       fed_mask=mask if step == 0 else None, tick=step, slot=r,
                       events=["arrival"] if step == 0 else [], ring_positions=ring,
                       checksums_k=[f"{r}{step}{l}".ljust(16, "a") for l in range(3)],
                       checksums_v=[f"{r}{step}{l}".ljust(16, "b") for l in range(3)],
                       experts=rng.integers(-1, 8, (n, 3, 2)),
                       rng_draws_before=step if r else 0, rng_draws_after=step + 1 if r else 0)
    return w


class WithoutStates(TempDir, unittest.TestCase):
    """A trace without states is written byte for byte as before states existed: the sha256
    of the files, taken with the code of that time (a trace without recurrent layers: git
    HEAD before them; recurrent_writer's: the recurrent layers' code before states)."""
    GOLDEN = {
        ("golden", "F32"): "a10864bf845b0feb46f7b323f61e3b98fa40596ed42a404bef7bd01cd4e17bea",
        ("golden", "BF16"): "7d75eea6fb82e0c3aa7ffde5e8901da70e17ef559d84ff02ce8ad05228116a0d",
        ("recurrent", "F32"): "698d3e6eb083771ce1da8087bb91d5bf213411ae3e0694cb7e524cdd7ef19c3f",
        ("recurrent", "BF16"): "f293febe26ae129da2afdbb3cff095810453015582fd7cfdebbf978785a45bd4",
        ("subset", "F32"): "ffa139d7cee5f862f8e37a06eec09b44cb8c3f0dbf68e913501a75b8d4bbc038",
        ("subset", "BF16"): "55cfb4d24d1a50a6187a5c90edcdb17ee3646a9584866ab51417346dd6d6e5f4",
    }

    def test_files_without_states_are_unchanged(self):
        make = {"golden": golden_writer, "recurrent": lambda: recurrent_writer(),
                "subset": lambda: recurrent_writer(recorded=[1, 2])}
        for (what, dtype), digest in self.GOLDEN.items():
            with self.subTest(what=what, dtype=dtype):
                w = make[what]() if what != "golden" else golden_writer(dtype)
                w.dtype = dtype
                path = self.path(f"{what}-{dtype}.kvtrace")
                w.save(path)
                with open(path, "rb") as f:
                    data = f.read()
                self.assertEqual(hashlib.sha256(data).hexdigest(), digest)
                self.assertNotIn(b"state", data)
                again = self.path(f"again-{what}-{dtype}.kvtrace")
                kvtrace.write_trace(kvtrace.read_trace(path), again, dtype=dtype)
                with open(again, "rb") as f:
                    self.assertEqual(f.read(), data)


class RecurrentChecksums(WithFakeXxhash, unittest.TestCase):
    def test_a_recurrent_layer_hashes_its_empty_rows(self):
        """The checksum row covers every layer; a recurrent layer's is that of no rows."""
        path = self.path("sums.kvtrace")
        recurrent_writer(snapshots=True).save(path)
        t = kvtrace.read_trace(path)
        self.assertIn("checksums", kvtrace._Container(path))
        empty = kvtrace.cache_checksum(np.zeros((H, 0, D), np.float32))
        self.assertEqual({(s.layers[0].checksum_k, s.layers[2].checksum_v) for s in t.steps}, {(empty, empty)})
        self.assertNotEqual(t.steps[0].layers[1].checksum_k, empty)


if __name__ == "__main__":
    unittest.main()
