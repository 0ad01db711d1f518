#!/usr/bin/env python3
"""Version-2 validation of kvscope_trace's reader: files built by hand (document and
packed tensors) with one thing wrong are refused naming the file and the field, like the
C++ reader. The shared helpers are in test_trace.py."""

import json
import os
import struct
import unittest

import numpy as np

from kvscope_trace import trace as kvtrace
from test_trace import Errors, assert_same_trace, packed, small_writer


class Validation(Errors, unittest.TestCase):
    """Version 2 files built by hand (document + packed tensors) with one thing wrong."""

    def rewrite(self, name, edit_doc=None, edit_tensors=None, meta=None, checksums=False):
        """small_writer's trace as a version-2 file, the document and/or the tensors (a dict
        name -> array or (array, dtype)) edited first."""
        t = small_writer().to_trace()
        doc = kvtrace.document(t)
        tensors = packed(t)
        if checksums:
            doc["steps"]["checksum_row"] = list(range(len(t.steps)))
            tensors["checksums"] = (np.arange(5 * 3 * 2, dtype=np.uint64).reshape(5, 3, 2) + 2 ** 63, "U64")
        if edit_doc:
            edit_doc(doc)
        if edit_tensors:
            edit_tensors(tensors)
        m = {"format": "kvtrace", "kvtrace_version": "2", "kvtrace": json.dumps(doc)}
        m.update(meta or {})
        path = self.path(name)
        kvtrace.write_safetensors(path, [(k, *(v if isinstance(v, tuple) else (v, "F32")))
                                         for k, v in tensors.items()], m)
        return path

    def test_hand_built_file_reads(self):
        path = self.rewrite("ok.kvtrace", checksums=True)
        t = kvtrace.read_trace(path)
        assert_same_trace(self, t, kvtrace.read_trace(self.rewrite("ok2.kvtrace", checksums=True)))
        self.assertEqual(t.steps[0].layers[0].checksum_k, "8000000000000000")
        self.assertEqual(t.steps[4].layers[2].checksum_v, f"{2 ** 63 + 29:016x}")
        np.testing.assert_array_equal(t.steps[4].logits, small_writer().steps[4].logits)

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
        e = self.error(self.rewrite("doc1.kvtrace", edit_doc=lambda d: d.update(version=1)))
        self.assertEqual(e.field, "version")
        self.assertIn("does not match", str(e))
        e = self.error(self.rewrite("json.kvtrace", meta={"kvtrace": "{not json"}))
        self.assertEqual(e.field, "__metadata__.kvtrace")

    def test_truncated_or_inconsistent_columns(self):
        def more_appended(d):  # the column total exceeds the tensor: a truncated trace
            d["steps"]["appended"][4][1] += 1
        e = self.error(self.rewrite("app.kvtrace", more_appended))
        self.assertEqual(e.field, "layer1.k")
        self.assertIn("truncated or inconsistent trace", str(e))

        def narrow(ts):
            ts["layer2.v"] = ts["layer2.v"][:, :-1, :]
        e = self.error(self.rewrite("narrow.kvtrace", edit_tensors=narrow))
        self.assertEqual(e.field, "layer2.v")
        self.assertIn("truncated or inconsistent trace", str(e))
        self.assertEqual(self.field("nok.kvtrace", edit_tensors=lambda ts: ts.pop("layer1.k")), "layer1.k")
        self.assertEqual(self.field("nov.kvtrace", edit_tensors=lambda ts: ts.pop("layer0.v")), "layer0.v")

        def no_counts(d):  # a layer with neither an appended count nor a snapshot length
            d["steps"]["appended"][2][0] = None
        self.assertEqual(self.field("none.kvtrace", no_counts), "steps.appended[2]")

    def test_logits_rows(self):
        def out_of_range(d):
            d["steps"]["logits_row"][2] = 5
        e = self.error(self.rewrite("row.kvtrace", out_of_range))
        self.assertEqual(e.field, "steps.logits_row[2]")
        self.assertIn("outside", str(e))

        def no_row(d):  # step 2 chose 623
            d["steps"]["logits_row"][2] = -1
        e = self.error(self.rewrite("norow.kvtrace", no_row))
        self.assertEqual(e.field, "steps.logits_row[2]")
        self.assertIn("chose", str(e))

        def fewer_rows(ts):
            ts["logits"] = ts["logits"][:3]
        self.assertEqual(self.field("rows.kvtrace", edit_tensors=fewer_rows), "steps.logits_row[3]")
        e = self.error(self.rewrite("nolog.kvtrace", edit_tensors=lambda ts: ts.pop("logits")))
        self.assertEqual(e.field, "logits")
        self.assertIn("steps.logits_row[0] names row 0", str(e))

        def below(d):
            d["steps"]["logits_row"][1] = -2
        self.assertEqual(self.field("neg.kvtrace", below), "steps.logits_row[1]")

    def test_columns_name_the_column_and_entry(self):
        def short(d):  # a column that is not an array of count entries
            d["steps"]["positions"].pop()
        e = self.error(self.rewrite("short.kvtrace", short))
        self.assertEqual(e.field, "steps.positions")
        self.assertIn("5 entries", str(e))
        self.assertEqual(self.field("obj.kvtrace", lambda d: d["steps"].update(chosen={"a": 1})), "steps.chosen")
        self.assertEqual(self.field("unk.kvtrace", lambda d: d["steps"].update(note=[1, 2])), "steps.note")
        self.assertEqual(self.field("cnt.kvtrace", lambda d: d["steps"].pop("count")), "steps.count")
        self.assertEqual(self.field("fed.kvtrace", lambda d: d["steps"].pop("fed_ids")), "steps.fed_ids")
        self.assertEqual(self.field("arr.kvtrace", lambda d: d.update(steps=[])), "steps")
        self.assertEqual(self.field("nul.kvtrace", lambda d: d["steps"].update(request=None)), "steps.request")
        t = kvtrace.read_trace(self.rewrite("nulopt.kvtrace", lambda d: d["steps"].update(fed_mask=None, tick=None)))
        self.assertEqual([s.tick for s in t.steps], [0, 1, 2, 3, 4])  # a null column is an absent one

        def bad_entry(d):  # an entry of the wrong type
            d["steps"]["positions"][3] = "4"
        self.assertEqual(self.field("entry.kvtrace", bad_entry), "steps.positions[3]")

        def bad_positions(d):
            d["steps"]["positions"][1].append(99)
        self.assertEqual(self.field("pos.kvtrace", bad_positions), "steps.positions[1]")

        def bad_mask(d):
            d["steps"]["fed_mask"] = [[1, 1]] + [None] * 4
        self.assertEqual(self.field("mask.kvtrace", bad_mask), "steps.fed_mask[0]")

        def bad_request(d):
            d["steps"]["request"][3] = 7
        e = self.error(self.rewrite("req.kvtrace", bad_request))
        self.assertEqual(e.field, "steps.request[3]")
        self.assertIn("not in requests", str(e))

        def float_step(d):
            d["steps"]["step"][0] = 0.5
        self.assertEqual(self.field("fs.kvtrace", float_step), "steps.step[0]")

        def bad_lengths(d):
            d["steps"]["cache_lengths"][0] = [3, 3]
        self.assertEqual(self.field("len.kvtrace", bad_lengths), "steps.cache_lengths[0]")

        def bad_appended(d):
            d["steps"]["appended"][1] = [4, -1, 4]
        self.assertEqual(self.field("neg.kvtrace", bad_appended), "steps.appended[1]")

        def two_layers(d):
            d["steps"]["snapshot_lengths"] = [[3, 3]] + [None] * 4
        self.assertEqual(self.field("snl.kvtrace", two_layers), "steps.snapshot_lengths[0]")

    def test_checksum_row_alone_gives_layers(self):
        def no_layer_data(d):  # step 2 keeps only its checksum row
            st = d["steps"]
            st["appended"][2] = st["cache_lengths"][2] = None
            st["appended"][4] = [7, 7, 7]  # step 2's columns now count as step 4's
        t = kvtrace.read_trace(self.rewrite("ckonly.kvtrace", no_layer_data, checksums=True))
        self.assertEqual([(l.cache_length, l.keys, l.checksum_k) for l in t.steps[2].layers],
                         [(0, None, f"{2 ** 63 + 12 + 2 * l:016x}") for l in range(3)])

    def test_checksum_tensor(self):
        def shape(dims):
            def edit(ts):
                ts["checksums"] = (np.zeros(dims, np.uint64), "U64")
            return edit
        for dims in ((5, 3, 3), (5, 2, 2), (5, 6), (5, 3, 2, 1)):
            with self.subTest(dims=dims):
                e = self.error(self.rewrite("cks.kvtrace", edit_tensors=shape(dims), checksums=True))
                self.assertEqual(e.field, "checksums")

        def float_sums(ts):
            ts["checksums"] = (np.zeros((5, 3, 2), np.float32), "F32")
        self.assertEqual(self.field("ckf.kvtrace", edit_tensors=float_sums, checksums=True), "checksums")

        def out_of_range(d):
            d["steps"]["checksum_row"][4] = 5
        self.assertEqual(self.field("ckr.kvtrace", out_of_range, checksums=True), "steps.checksum_row[4]")
        self.assertEqual(self.field("ckm.kvtrace", edit_tensors=lambda ts: ts.pop("checksums"), checksums=True),
                         "checksums")

    def test_shapes_that_contradict_the_model(self):
        def heads(d):
            d["model"]["num_kv_heads"] = 3
        self.assertEqual(self.field("heads.kvtrace", heads), "layer0.k")

        def head_dim(d):
            d["model"]["head_dim"] = 8
        self.assertEqual(self.field("dim.kvtrace", head_dim), "layer0.k")

        def vocab(d):
            d["model"]["vocab_size"] = 1000
        e = self.error(self.rewrite("vocab.kvtrace", vocab))
        self.assertEqual(e.field, "logits")
        self.assertIn("vocab_size", str(e))

        def int_logits(ts):
            ts["logits"] = (ts["logits"].astype(np.int32), "I32")
        self.assertEqual(self.field("intl.kvtrace", edit_tensors=int_logits), "logits.dtype")


if __name__ == "__main__":
    unittest.main()
