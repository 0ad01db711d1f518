#!/usr/bin/env python3
"""Tests for kvscope_trace (numpy only): the version-2 format, the writer, validation,
checksums and the command line. Version-1 reading is tested in test_trace_v1.py, the
recording side (kvscope_trace.hf_trace) in test_hf_trace.py; both use the helpers here.

They test the installed package (`pip install ./python`; CTest python_trace_package makes
a fresh virtualenv for them), not the source folder:

    VENV/bin/python -m unittest discover -s python/tests    all of them
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

import kvscope_trace
from kvscope_trace import cli
from kvscope_trace import format_v2 as kvtrace_v2
from kvscope_trace import trace as kvtrace

HERE = os.path.dirname(os.path.abspath(__file__))
# the repository's fixtures (data, not code): KVSCOPE_REPO or this file's checkout
REPO = os.environ.get("KVSCOPE_REPO") or os.path.join(HERE, "..", "..")
FIXTURES = os.path.join(REPO, "tests", "fixtures")
FIXTURES_V1 = os.path.join(FIXTURES, "traces-v1")

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


def header(path):
    """The safetensors JSON header of a file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def packed(t):
    """The version-2 tensors of trace `t`, packed by hand as docs/trace-format.md says; the
    checksums (when the package computes them: the xxhash module) hashed here of each step's
    snapshot as contiguous little-endian float32."""
    out = {"logits": np.stack([s.logits for s in t.steps if s.logits is not None])}
    if kvtrace.HAVE_XXHASH and any(rec.cache_keys is not None for s in t.steps for rec in s.layers):
        import xxhash
        digest = lambda a: xxhash.xxh3_64_intdigest(np.ascontiguousarray(a, "<f4").tobytes())
        out["checksums"] = np.array([[[digest(r.cache_keys), digest(r.cache_values)] for r in s.layers]
                                     for s in t.steps if s.layers], dtype=np.uint64)
    for l in range(t.model["num_layers"]):
        for name, attr in (("k", "keys"), ("v", "values"), ("cache_k", "cache_keys"), ("cache_v", "cache_values")):
            parts = [getattr(s.layers[l], attr) for s in t.steps if s.layers]
            parts = [a for a in parts if a is not None]
            if parts:
                out[f"layer{l}.{name}"] = np.concatenate(parts, axis=1)
    return out


def assert_same_trace(test, a, b, versions=True):
    """Every field and array of two traces is equal (versions too unless versions=False)."""
    for f in ("model", "requests", "engine", "mode", "events", "faults", "extra", "stored_dtypes"):
        test.assertEqual(getattr(a, f), getattr(b, f), f)
    if versions:
        test.assertEqual(a.version, b.version)
    test.assertEqual(len(a.steps), len(b.steps))
    for i, (x, y) in enumerate(zip(a.steps, b.steps)):
        for f in ("request", "step", "tick", "slot", "fed_ids", "positions", "fed_mask", "chosen",
                  "rng_draws_before", "rng_draws_after", "weights_version", "events", "extra",
                  "draft_count", "accepted_count"):
            test.assertEqual(getattr(x, f), getattr(y, f), f"step {i} {f}")
        test.assertEqual(x.logits is None, y.logits is None, f"step {i} logits")
        if x.logits is not None:
            np.testing.assert_array_equal(x.logits, y.logits, f"step {i} logits")
        test.assertEqual(len(x.layers), len(y.layers), f"step {i} layers")
        for l, (p, q) in enumerate(zip(x.layers, y.layers)):
            for f in ("cache_length", "checksum_k", "checksum_v", "derived"):
                test.assertEqual(getattr(p, f), getattr(q, f), f"step {i} layer {l} {f}")
            for f in ("keys", "values", "cache_keys", "cache_values"):
                u, v = getattr(p, f), getattr(q, f)
                test.assertEqual(u is None, v is None, f"step {i} layer {l} {f}")
                if u is not None:
                    test.assertEqual(u.dtype, np.float32)
                    np.testing.assert_array_equal(u, v, f"step {i} layer {l} {f}")


def fixture(name):
    path = os.path.join(FIXTURES_V1, name)
    if not os.path.exists(path):
        raise unittest.SkipTest(f"{path} not found")
    return path


class TempDir:
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)


class FakeXxhash:
    """Stands in for the optional xxhash module to test the checksum plumbing."""
    @staticmethod
    def xxh3_64_intdigest(data):
        import hashlib
        return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


class WithFakeXxhash(TempDir):
    """Checksums on, computed by FakeXxhash."""

    def setUp(self):
        super().setUp()
        self.saved = kvtrace._xxhash, kvtrace.HAVE_XXHASH
        kvtrace._xxhash, kvtrace.HAVE_XXHASH = FakeXxhash, True

    def tearDown(self):
        kvtrace._xxhash, kvtrace.HAVE_XXHASH = self.saved
        super().tearDown()


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

    def test_expert_choices_round_trip_and_damaged_ones_are_refused(self):
        w = small_writer()
        L = MODEL["num_layers"]
        two = np.full((3, L, 2), -1, np.int32)
        two[:, 0] = [[1, 3], [0, 2], [3, 1]]  # layer 0 routed, the others dense
        three = np.full((1, L, 3), -1, np.int32)
        three[0, 0] = [2, 0, 1]  # a step whose token took 3 experts: the file pads the others
        w.steps[0].experts, w.steps[2].experts = two, three
        path = self.path("experts.kvtrace")
        w.save(path)
        t = kvtrace.read_trace(path)
        padded = np.full((3, L, 3), -1, np.int32)
        padded[:, :, :2] = two
        np.testing.assert_array_equal(t.steps[0].experts, padded)
        np.testing.assert_array_equal(t.steps[2].experts, three)
        self.assertIsNone(t.steps[1].experts)
        doc = kvtrace.document(t)
        self.assertEqual(doc["steps"]["expert_row"], [0, -1, 3, -1, -1])
        with self.assertRaises(ValueError):  # one row per fed entry
            w.add_step(request=0, step=2, fed_ids=[623], positions=[4], experts=np.zeros((2, L, 2), np.int32))
        with self.assertRaises(ValueError):  # ids below -1
            w.add_step(request=0, step=2, fed_ids=[623], positions=[4], experts=np.full((1, L, 2), -3))
        # A damaged tensor: an id below -1, named with the file and the tensor.
        with open(path, "rb") as f:
            raw = bytearray(f.read())
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        at = 8 + n + header["experts"]["data_offsets"][0]
        raw[at:at + 4] = (-9).to_bytes(4, "little", signed=True)
        bad = self.path("experts-bad.kvtrace")
        with open(bad, "wb") as f:
            f.write(bytes(raw))
        with self.assertRaises(kvtrace.TraceError) as e:
            kvtrace.read_trace(bad)
        self.assertIn("experts", str(e.exception))
        self.assertIn("expert -9", str(e.exception))

    def test_file_layout_is_safetensors(self):
        path = self.path("layout.kvtrace")
        small_writer().save(path)
        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        self.assertEqual((8 + n) % 8, 0, "data buffer must start 8-byte aligned")
        header = json.loads(data[8:8 + n])
        self.assertEqual(header["__metadata__"]["format"], "kvtrace")
        self.assertEqual(header["__metadata__"]["kvtrace_version"], "2")
        self.assertNotIn(", ", header["__metadata__"]["kvtrace"], "the document is written compactly")
        doc = json.loads(header["__metadata__"]["kvtrace"])
        self.assertEqual(doc["version"], 2)
        # packed: one tensor per kind and layer, the 5 steps' 3+4+1+1+6 records along axis 1
        self.assertEqual(sorted(k for k in header if k != "__metadata__"),
                         sorted(["logits"] + [f"layer{l}.{x}" for l in range(3) for x in "kv"]))
        self.assertEqual(header["layer2.k"]["shape"], [2, 15, 16])
        self.assertEqual(header["logits"]["shape"], [5, 1200])
        self.assertEqual(header["logits"]["dtype"], "F32")
        end = max(e["data_offsets"][1] for k, e in header.items() if k != "__metadata__")
        self.assertEqual(len(data), 8 + n + end)
        st = doc["steps"]
        self.assertEqual(st["count"], 5)
        self.assertEqual(st["request"], [0, 1, 0, 1, 1])
        self.assertEqual(st["step"], [0, 0, 1, 1, 2])
        self.assertEqual(st["positions"][4], [0, 1, 2, 3, 4, 5])
        self.assertEqual(st["logits_row"], [0, 1, 2, 3, 4])
        self.assertEqual(st["appended"], [[3] * 3, [4] * 3, [1] * 3, [1] * 3, [6] * 3])
        self.assertEqual(st["cache_lengths"], [[3] * 3, [4] * 3, [4] * 3, [5] * 3, [6] * 3])
        self.assertEqual(st["events"], [["arrival"], ["arrival"], [], [], ["cache_reset"]])
        # all-default optional columns are left out (tick == i, slot == request, no masks,
        # no snapshots, no checksums)
        left_out = ("tick", "slot", "fed_mask", "snapshot_lengths", "checksum_row", "draft_count",
                    "accepted_count", "ring_row", "reused_count", "reused_from", "reused_blocks",
                    "expert_row", "state_row")
        for k in left_out:
            self.assertNotIn(k, st)
        self.assertEqual(set(st) - {"count"}, set(kvtrace_v2.STEP_COLUMNS) - set(left_out))

    def test_writer_packs_as_the_spec_says(self):
        for snapshots in (False, True):
            with self.subTest(snapshots=snapshots):
                w = small_writer(snapshots=snapshots)
                path = self.path("packed.kvtrace")
                w.save(path)
                f = kvtrace._Container(path)
                want = packed(w.to_trace())
                self.assertEqual(sorted(f.entries), sorted(want))
                for name, a in want.items():
                    np.testing.assert_array_equal(f.read(name) if name == "checksums" else f.read_float(name), a, name)
                steps = json.loads(f.metadata["kvtrace"])["steps"]
                if snapshots:
                    self.assertEqual(steps["snapshot_lengths"], steps["cache_lengths"])

    def test_minimal_steps_write_only_the_required_columns(self):
        w = kvtrace.TraceWriter(MODEL)
        w.add_request(0, prompt_ids=[1, 2])
        w.add_step(0, 0, [1, 2], [0, 1])
        w.add_step(0, 1, [3], [2])
        path = self.path("min.kvtrace")
        w.save(path)
        doc = json.loads(header(path)["__metadata__"]["kvtrace"])
        self.assertEqual(doc["steps"], {"count": 2, "request": [0, 0], "step": [0, 1],
                                        "fed_ids": [[1, 2], [3]], "positions": [[0, 1], [2]]})
        self.assertEqual([k for k in header(path) if k != "__metadata__"], [])
        t = kvtrace.read_trace(path)
        self.assertEqual([(s.tick, s.slot, s.chosen, s.logits, s.layers) for s in t.steps],
                         [(0, 0, -1, None, []), (1, 0, -1, None, [])])

    def test_unknown_columns_and_keys_are_kept(self):
        w = small_writer()
        w.extra = {"run_id": "abc", "notes": {"x": 1}}
        w.steps[1].extra = {"latency_ms": 3.5}
        w.steps[3].extra = {"latency_ms": 1.0, "batch": [0, 1]}
        path, again = self.path("extra.kvtrace"), self.path("extra2.kvtrace")
        w.save(path)
        st = json.loads(header(path)["__metadata__"]["kvtrace"])["steps"]
        self.assertEqual(st["latency_ms"], [None, 3.5, None, 1.0, None])
        self.assertEqual(st["batch"], [None, None, None, [0, 1], None])
        t = kvtrace.read_trace(path)
        self.assertEqual(t.extra, {"run_id": "abc", "notes": {"x": 1}})
        self.assertEqual([s.extra for s in t.steps],
                         [{}, {"latency_ms": 3.5}, {}, {"latency_ms": 1.0, "batch": [0, 1]}, {}])
        kvtrace.write_trace(t, again)
        assert_same_trace(self, t, kvtrace.read_trace(again))

    def test_partial_layer_data(self):
        """Steps without layer data, a step whose layer has only a snapshot, and the null
        entries of `appended` that this gives."""
        w = small_writer(snapshots=True)
        w.steps[2].layers = []                     # no layer data at all
        rec = w.steps[3].layers[1]                 # layer 1: snapshot only
        rec.keys = rec.values = None
        path = self.path("partial.kvtrace")
        w.save(path)
        st = json.loads(header(path)["__metadata__"]["kvtrace"])["steps"]
        self.assertEqual(st["appended"][2], None)
        self.assertEqual(st["appended"][3], [1, None, 1])
        self.assertEqual(st["cache_lengths"][2], None)
        t = kvtrace.read_trace(path)
        self.assertEqual(t.steps[2].layers, [])
        full = small_writer(snapshots=True)
        got, want = t.steps[3].layers[1], full.steps[3].layers[1]
        self.assertTrue(got.derived)
        self.assertFalse(t.steps[3].layers[0].derived)
        # derived from request 1's previous step with layer data (its step 0: 4 columns)
        np.testing.assert_array_equal(got.keys, want.keys)
        self.assertEqual(got.cache_length, 5)

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


class Errors(TempDir):
    """What both versions' validation tests share; rewrite() writes a file with one thing wrong."""

    def error(self, path):
        with self.assertRaises(kvtrace.TraceError) as cm:
            kvtrace.read_trace(path)
        self.assertEqual(cm.exception.file, path)
        self.assertIsInstance(cm.exception, ValueError)
        return cm.exception

    def field(self, name, edit_doc=None, edit_tensors=None, **kw):
        return self.error(self.rewrite(name, edit_doc, edit_tensors, **kw)).field

    def test_document_fields_name_the_field(self):
        def bad_prompt(d):
            d["requests"][1]["prompt_ids"].append(1200)
        self.assertEqual(self.field("prompt.kvtrace", bad_prompt), "requests[1].prompt_ids")
        self.assertEqual(self.field("nl.kvtrace", lambda d: d["model"].pop("num_layers")), "model.num_layers")

        def bad_policy(d):
            d["requests"][1]["policy"]["temperature"] = -1
        self.assertEqual(self.field("pol.kvtrace", bad_policy), "requests[1].policy")
        self.assertEqual(self.field("mode.kvtrace", lambda d: d.update(mode="speculative")), "mode")


class Size(TempDir, unittest.TestCase):
    def test_many_small_steps_cost_little_beyond_the_raw_tensors(self):
        """Version 2's purpose: a few dozen bytes per step besides the tensor bytes, however
        small the model (version 1 spent ~950 bytes per step)."""
        model = {"architecture": "llama", "num_layers": 3, "num_heads": 4, "num_kv_heads": 2,
                 "head_dim": 16, "vocab_size": 512, "max_positions": 256}
        ratio = measure_size_ratio(self.path("size.kvtrace"), model, 128)
        self.assertLess(ratio, 1.1)


def measure_size_ratio(path, model, steps, seed=0):
    """File size / raw float32 bytes (appended K/V + logits) of `steps` single-token steps."""
    rng = np.random.default_rng(seed)
    L, H, D, V = (model[k] for k in ("num_layers", "num_kv_heads", "head_dim", "vocab_size"))
    w = kvtrace.TraceWriter(model, engine="size test")
    tokens = [int(x) for x in rng.integers(2, V, steps + 1)]
    w.add_request(0, prompt_ids=tokens[:1], generated=tokens[1:], max_new_tokens=steps)
    raw = 0
    for i in range(steps):
        k = [rand(rng, H, 1, D) for _ in range(L)]
        v = [rand(rng, H, 1, D) for _ in range(L)]
        logits = rand(rng, V)
        w.add_step(0, i, [tokens[i]], [i], chosen=tokens[i + 1], logits=logits, keys=k, values=v,
                   events=["arrival"] if i == 0 else [])
        raw += logits.nbytes + sum(a.nbytes for a in k + v)
    w.save(path)
    return os.path.getsize(path) / raw


class Container(TempDir, unittest.TestCase):
    def test_unsigned_integer_tensors(self):
        path = self.path("ints.safetensors")
        big = np.array([[0, 1], [2 ** 63, 2 ** 64 - 1]], np.uint64)
        small = np.array([7, 65535], np.uint16)
        kvtrace.write_safetensors(path, [("a", big, "U64"), ("b", np.array([2 ** 32 - 1], np.uint32), "U32"),
                                         ("c", small, "U16")], {})
        h = header(path)
        self.assertEqual([h[k]["dtype"] for k in "abc"], ["U64", "U32", "U16"])
        f = kvtrace._Container(path)
        got = f.read("a")
        self.assertEqual(got.dtype, np.uint64)
        np.testing.assert_array_equal(got, big)
        self.assertEqual(int(f.read("b")[0]), 2 ** 32 - 1)
        np.testing.assert_array_equal(f.read("c"), small)
        with self.assertRaises(ValueError):
            kvtrace.write_safetensors(path, [("x", np.zeros(2, np.float32), "U64")], {})


class Checksums(WithFakeXxhash, unittest.TestCase):

    def test_writer_checksums_snapshots(self):
        path = self.path("snap.kvtrace")
        small_writer(snapshots=True).save(path)
        t = kvtrace.read_trace(path)
        rec = t.steps[4].layers[2]
        self.assertEqual(rec.checksum_k, kvtrace.cache_checksum(rec.cache_keys))
        self.assertEqual(rec.checksum_v, kvtrace.cache_checksum(rec.cache_values))

    def test_checksums_are_one_u64_tensor(self):
        w = small_writer(snapshots=True)
        for l in w.steps[1].layers[1:]:  # a step without a complete set gets no row
            l.checksum_k = None
        path = self.path("u64.kvtrace")
        w.save(path)
        h = header(path)
        self.assertEqual(h["checksums"]["dtype"], "U64")
        self.assertEqual(h["checksums"]["shape"], [4, 3, 2])
        self.assertEqual(h["checksums"]["data_offsets"][0] % 8, 0)
        steps = json.loads(h["__metadata__"]["kvtrace"])["steps"]
        self.assertEqual(steps["checksum_row"], [0, -1, 1, 2, 3])
        sums = kvtrace._Container(path).read("checksums")
        rec = w.steps[4].layers[2]
        self.assertEqual(int(sums[3, 2, 0]), int(rec.checksum_k, 16))
        self.assertEqual(int(sums[3, 2, 1]), int(rec.checksum_v, 16))
        t = kvtrace.read_trace(path)
        self.assertEqual([l.checksum_k for l in t.steps[1].layers], [None] * 3)
        for a, b in zip(w.steps, t.steps):
            if a is not w.steps[1]:
                self.assertEqual([(l.checksum_k, l.checksum_v) for l in a.layers],
                                 [(l.checksum_k, l.checksum_v) for l in b.layers])


class Cli(TempDir, unittest.TestCase):
    def run_main(self, *argv):
        out = io.StringIO()
        err = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(argv))
        return rc, out.getvalue() + err.getvalue()

    def test_info_and_roundtrip(self):
        a, b = self.path("a.kvtrace"), self.path("b.kvtrace")
        small_writer(snapshots=True).save(a)
        rc, out = self.run_main("info", a)
        self.assertEqual(rc, 0, out)
        self.assertIn("kvtrace v2,", out)
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

    def test_roundtrip_rewrites_version1_as_version2(self):
        old, new = fixture("llama-engine-snapshots.kvtrace"), self.path("v2.kvtrace")
        rc, out = self.run_main("info", old)
        self.assertEqual(rc, 0, out)
        self.assertIn("kvtrace v1 (read only", out)
        self.assertIn("requests: 2, steps: 8, snapshots: yes, checksums: yes", out)
        rc, out = self.run_main("roundtrip", old, new)
        self.assertEqual(rc, 0, out)
        self.assertEqual(header(new)["__metadata__"]["kvtrace_version"], "2")
        rc, out2 = self.run_main("info", new)
        self.assertIn("kvtrace v2,", out2)
        self.assertEqual(out2.split("\n")[1:], self.run_main("info", old)[1].split("\n")[1:])
        snap = self.path("snap.kvtrace")
        rc, out = self.run_main("roundtrip", old, snap, "--snapshots-only")
        self.assertEqual(rc, 0, out)
        self.assertFalse(any(k.endswith((".k", ".v")) or k == "checksums" for k in header(snap)))
        t = kvtrace.read_trace(snap)
        self.assertTrue(all(l.derived for s in t.steps for l in s.layers))
        np.testing.assert_array_equal(t.steps[3].layers[1].keys, kvtrace.read_trace(old).steps[3].layers[1].keys)

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



if __name__ == "__main__":  # the whole suite (discover python/tests/test_*.py)
    unittest.main(module=None, argv=[sys.argv[0], "discover", "-s", HERE, "-p", "test_*.py"] + sys.argv[1:])
