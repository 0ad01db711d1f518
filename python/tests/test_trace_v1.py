#!/usr/bin/env python3
"""Tests for reading version-1 traces (kvscope_trace.format_v1 through read_trace):
hand-edited version-1 files keep their version-1 error fields, and the committed fixtures
in tests/fixtures/traces-v1 read as before and convert to version 2 losslessly.

    VENV/bin/python -m unittest discover -s python/tests -p test_trace_v1.py
"""

import json
import os
import unittest

import numpy as np

from kvscope_trace import example as make_example_trace
from kvscope_trace import trace as kvtrace
from test_trace import Errors, TempDir, assert_same_trace, fixture, header  # noqa: E402


class ValidationV1(Errors, unittest.TestCase):
    """Version 1 files (the committed example, edited) keep their version-1 field names."""

    def rewrite(self, name, edit_doc=None, edit_tensors=None, meta=None, drop=()):
        f = kvtrace._Container(fixture("example.kvtrace"))
        doc = json.loads(f.metadata["kvtrace"])
        if edit_doc:
            edit_doc(doc)
        tensors = [(k, f.read_float(k), f.dtype(k)) for k in f.entries if k not in drop]
        m = dict(f.metadata, kvtrace=json.dumps(doc))
        m.update(meta or {})
        path = self.path(name)
        kvtrace.write_safetensors(path, tensors, m)
        return path

    def test_hand_built_file_reads(self):
        t = kvtrace.read_trace(self.rewrite("ok.kvtrace"))
        self.assertEqual(t.version, 1)
        self.assertEqual(len(t.steps), 5)

    def test_wrong_format_and_version(self):
        e = self.error(self.rewrite("doc2.kvtrace", edit_doc=lambda d: d.update(version=2)))
        self.assertEqual(e.field, "version")
        e = self.error(self.rewrite("arr.kvtrace", lambda d: d.update(steps={"count": 0})))
        self.assertEqual(e.field, "steps")

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
        self.assertEqual(self.field("pos.kvtrace", bad_positions), "steps[1].positions")
        self.assertEqual(self.field("heads.kvtrace", lambda d: d["model"].update(num_kv_heads=3)),
                         "step0.layer0.k")
        self.assertEqual(self.field("vocab.kvtrace", lambda d: d["model"].update(vocab_size=1000)),
                         "step0.logits")

        def bad_request(d):
            d["steps"][3]["request"] = 7
        self.assertEqual(self.field("req.kvtrace", bad_request), "steps[3].request")

        def float_step(d):
            d["steps"][0]["step"] = 0.5
        self.assertEqual(self.field("fs.kvtrace", float_step), "steps[0].step")

        def bad_lengths(d):
            d["steps"][0]["cache_lengths"] = [3, 3]
        self.assertEqual(self.field("len.kvtrace", bad_lengths), "steps[0].cache_lengths")

        def bad_checksum(d):
            d["steps"][0]["checksums_k"] = ["xyz"] * 3
            d["steps"][0]["checksums_v"] = ["0"] * 3
        self.assertEqual(self.field("ck.kvtrace", bad_checksum), "steps[0].checksums_k")


    def test_version2_step_columns_are_ignored(self):
        """The speculative and prefix-cache columns are version 2's: in a version 1 step they
        are ignored, even nonsense values (kept as unknown keys), as kvscope-cli does."""
        def add(d):
            for st in d["steps"]:
                st.update(reused_count=1000000, reused_from=7, reused_blocks="abc", draft_count=99,
                          accepted_count=-1)
        plain, t = kvtrace.read_trace(self.rewrite("plain.kvtrace")), kvtrace.read_trace(self.rewrite("v2cols.kvtrace", add))
        self.assertEqual([(s.reused_count, s.reused_from, s.reused_blocks, s.draft_count, s.accepted_count)
                          for s in t.steps], [(0, -1, None, 0, 0)] * len(t.steps))
        self.assertEqual(t.steps[0].extra["reused_count"], 1000000)
        # rewritten as version 2 they are not columns
        out = self.path("v2cols-as-v2.kvtrace")
        kvtrace.write_trace(t, out)
        doc = json.loads(header(out)["__metadata__"]["kvtrace"])
        self.assertFalse({"reused_count", "draft_count"} & set(doc["steps"]))
        for s in t.steps:
            s.extra = {}
        assert_same_trace(self, plain, t)


class Version1Fixtures(TempDir, unittest.TestCase):
    """The committed version-1 traces in tests/fixtures/traces-v1 (written by the version-1
    make_example_trace.py and by the C++ engine) read as before and convert to version 2."""

    def fresh(self, name, **kw):
        """make_example_trace.py's trace (the same formulas), written and read as version 2."""
        path = self.path(name)
        w = make_example_trace.build(**kw)
        for s in w.steps:  # the version-1 fixtures were written without checksums
            for rec in s.layers:
                rec.checksum_k = rec.checksum_v = None
        w.save(path)
        self.assertEqual(header(path)["__metadata__"]["kvtrace_version"], "2")
        return kvtrace.read_trace(path)

    def test_example_matches_a_fresh_version2_trace(self):
        old = kvtrace.read_trace(fixture("example.kvtrace"))
        self.assertEqual(old.version, 1)
        new = self.fresh("example.kvtrace", snapshots=False, appended=True)
        self.assertEqual(new.version, 2)
        assert_same_trace(self, old, new, versions=False)
        # and the formulas themselves, spot-checked
        k, v = make_example_trace.records(2, 3, 5, 1)  # request 1's rebuild after the weight update
        np.testing.assert_array_equal(old.steps[3].layers[2].keys[:, 3:], k)
        np.testing.assert_array_equal(old.steps[3].layers[2].values[:, 3:], v)
        np.testing.assert_array_equal(old.steps[4].logits, make_example_trace.logits(4, 17))
        self.assertEqual([s.layers[0].cache_length for s in old.steps], [3, 4, 4, 5, 5])

    def test_snapshot_only_example_derives_appended_records(self):
        old = kvtrace.read_trace(fixture("example-snapshots-only.kvtrace"))
        self.assertTrue(old.has_snapshots())
        assert_same_trace(self, old, self.fresh("snap.kvtrace", snapshots=True, appended=False), versions=False)
        full = make_example_trace.build(snapshots=True, appended=True).to_trace()
        for i, (a, b) in enumerate(zip(full.steps, old.steps)):
            for l, (la, lb) in enumerate(zip(a.layers, b.layers)):
                self.assertTrue(lb.derived, (i, l))
                np.testing.assert_array_equal(la.keys, lb.keys)      # across the cache resets
                np.testing.assert_array_equal(la.values, lb.values)
                np.testing.assert_array_equal(la.cache_keys, lb.cache_keys)
                self.assertEqual(lb.cache_length, la.cache_keys.shape[1])

    def test_engine_trace_with_snapshots_appends_and_a_duplicate_append(self):
        t = kvtrace.read_trace(fixture("llama-engine-snapshots.kvtrace"))
        self.assertEqual((t.version, t.engine, len(t.requests), len(t.steps)), (1, "kvscope 0.1.0", 2, 8))
        self.assertEqual(t.faults, ["duplicate_append:layer=1,request=-1,step=2"])
        self.assertEqual([(s.request, s.step) for s in t.steps],
                         [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1), (0, 3), (1, 2), (1, 3)])
        # step 2 of both requests appended twice to layer 1
        self.assertEqual([[l.keys.shape[1] for l in s.layers] for s in t.steps],
                         [[7] * 3, [4] * 3, [1] * 3, [1, 2, 1], [1] * 3, [1] * 3, [1, 2, 1], [1] * 3])
        self.assertEqual([s.layers[1].cache_length for s in t.steps], [7, 4, 8, 10, 5, 11, 7, 8])
        for s in t.steps:
            self.assertEqual(s.logits.shape, (1200,))
            for l in s.layers:
                self.assertFalse(l.derived)  # both stored: nothing derived
                self.assertEqual(l.cache_keys.shape, (2, l.cache_length, 16))
                np.testing.assert_array_equal(l.cache_keys[:, -l.keys.shape[1]:], l.keys)
                np.testing.assert_array_equal(l.cache_values[:, -l.values.shape[1]:], l.values)
                self.assertRegex(l.checksum_k, "^[0-9a-f]{16}$")
                self.assertRegex(l.checksum_v, "^[0-9a-f]{16}$")
        self.assertEqual(t.steps[0].layers[0].checksum_k, "21f03bcf220cd5d4")
        self.assertEqual(t.steps[7].layers[2].checksum_v, "c70624691767ed26")
        np.testing.assert_array_equal(t.steps[3].layers[1].keys[:, 0], t.steps[3].layers[1].keys[:, 1])

    def test_version1_saved_reads_back_identical(self):
        for name in ("example.kvtrace", "example-snapshots-only.kvtrace", "llama-engine-snapshots.kvtrace"):
            with self.subTest(name=name):
                old = kvtrace.read_trace(fixture(name))
                path, again = self.path("v2-" + name), self.path("v2b-" + name)
                kvtrace.write_trace(old, path)
                h = header(path)
                self.assertEqual(h["__metadata__"]["kvtrace_version"], "2")
                self.assertFalse(any(k.startswith("step") for k in h))
                new = kvtrace.read_trace(path)
                self.assertEqual(new.version, 2)
                assert_same_trace(self, old, new, versions=False)
                kvtrace.write_trace(new, again)  # and version 2 rewrites byte for byte
                with open(path, "rb") as fa, open(again, "rb") as fb:
                    self.assertEqual(fa.read(), fb.read())
                if "engine" in name:  # its checksums travel as the U64 tensor
                    self.assertEqual(h["checksums"]["dtype"], "U64")
                    self.assertEqual(h["checksums"]["shape"], [8, 3, 2])
                    self.assertLess(os.path.getsize(path), os.path.getsize(fixture(name)))

    def test_unknown_version1_step_keys_become_columns(self):
        f = kvtrace._Container(fixture("example.kvtrace"))
        doc = json.loads(f.metadata["kvtrace"])
        doc["steps"][1]["queue_ms"] = 2.5
        doc["note"] = "kept"
        path = self.path("extra-v1.kvtrace")
        kvtrace.write_safetensors(path, [(k, f.read_float(k), f.dtype(k)) for k in f.entries],
                                  dict(f.metadata, kvtrace=json.dumps(doc)))
        old = kvtrace.read_trace(path)
        self.assertEqual(old.steps[1].extra, {"queue_ms": 2.5})
        out = self.path("extra-v2.kvtrace")
        kvtrace.write_trace(old, out)
        st = json.loads(header(out)["__metadata__"]["kvtrace"])["steps"]
        self.assertEqual(st["queue_ms"], [None, 2.5, None, None, None])
        assert_same_trace(self, old, kvtrace.read_trace(out), versions=False)


if __name__ == "__main__":
    unittest.main()
