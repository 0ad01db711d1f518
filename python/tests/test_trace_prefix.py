"""Prefix-cache hits in version-2 traces: the reused_count / reused_from / reused_blocks step
columns (docs/trace-format.md, "Prefix-cache hits") written, read back, validated, left out
when no step reused anything, and the cache lengths the reader derives for a hit step (the
reused rows first in its records, then the fed tokens')."""

import json
import os
import tempfile
import unittest

import numpy as np

from kvscope_trace import TraceError, TraceWriter, read_trace, write_trace
from kvscope_trace import cli, format_v2
from kvscope_trace.container import write_safetensors

MODEL = {"architecture": "llama", "num_layers": 2, "num_kv_heads": 1, "head_dim": 4,
         "vocab_size": 50, "max_positions": 64}
PROMPT_A = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
PROMPT_B = [1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22]  # shares two blocks of 4 with A


def records(n, seed):
    rng = np.random.default_rng(seed)
    return ([rng.standard_normal((1, n, 4)).astype(np.float32) for _ in range(2)],
            [rng.standard_normal((1, n, 4)).astype(np.float32) for _ in range(2)])


def prefix_writer(reused=8, reused_from=0, blocks=(11, 12), snapshots=False, hit=True):
    """Request 0 prefills A (10 entries) and decodes one token; request 1 takes A's first
    `reused` rows (hit=True) and feeds only B[reused:], or prefills all of B (hit=False)."""
    w = TraceWriter(model=dict(MODEL))
    w.add_request(0, prompt_ids=PROMPT_A, generated=[30, 31], max_new_tokens=2)
    w.add_request(1, prompt_ids=PROMPT_B, generated=[40, 41], max_new_tokens=2)
    logits = np.zeros(50, np.float32)
    ka, va = records(11, 0)
    kb, vb = records(12, 1)
    if hit:  # the reused rows are A's rows, as the cache holds them
        for l in range(2):
            kb[l][:, :reused], vb[l][:, :reused] = ka[l][:, :reused], va[l][:, :reused]

    def layer_data(k, v, begin, end):
        if snapshots:
            return dict(cache_keys=[x[:, :end] for x in k], cache_values=[x[:, :end] for x in v])
        return dict(keys=[x[:, begin:end] for x in k], values=[x[:, begin:end] for x in v])
    w.add_step(request=0, step=0, fed_ids=PROMPT_A, positions=list(range(10)), chosen=30,
               logits=logits, **layer_data(ka, va, 0, 10))
    w.add_step(request=0, step=1, fed_ids=[30], positions=[10], chosen=31, logits=logits,
               **layer_data(ka, va, 10, 11))
    start = reused if hit else 0
    w.add_step(request=1, step=0, fed_ids=PROMPT_B[start:], positions=list(range(start, 11)), chosen=40,
               logits=logits, **layer_data(kb, vb, 0, 11),
               **(dict(reused_count=reused, reused_from=reused_from, reused_blocks=blocks) if hit else {}))
    w.add_step(request=1, step=1, fed_ids=[40], positions=[11], chosen=41, logits=logits,
               **layer_data(kb, vb, 11, 12))
    return w, (ka, va, kb, vb)


def document_of(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n))["__metadata__"]
    return json.loads(meta["kvtrace"])


class PrefixColumns(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvtrace-prefix-")

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_round_trip_keeps_the_hit(self):
        for snapshots in (False, True):
            with self.subTest(snapshots=snapshots):
                w, (ka, va, kb, vb) = prefix_writer(snapshots=snapshots)
                w.save(self.path("a.kvtrace"))
                t = read_trace(self.path("a.kvtrace"))
                self.assertEqual([(s.reused_count, s.reused_from, s.reused_blocks) for s in t.steps],
                                 [(0, -1, None), (0, -1, None), (8, 0, [11, 12]), (0, -1, None)])
                hit = t.steps[2]
                self.assertEqual(hit.fed_ids, PROMPT_B[8:])
                self.assertEqual(hit.positions, [8, 9, 10])
                # The hit step's records: the 8 reused rows, then the 3 fed tokens'; its cache
                # lengths count both, and the next step continues from there.
                for l in range(2):
                    self.assertEqual(hit.layers[l].keys.shape, (1, 11, 4))
                    np.testing.assert_array_equal(hit.layers[l].keys[:, :8], ka[l][:, :8])
                    np.testing.assert_array_equal(hit.layers[l].values, vb[l][:, :11])
                    self.assertEqual(hit.layers[l].cache_length, 11)
                    self.assertEqual(t.steps[3].layers[l].cache_length, 12)
                    self.assertEqual(t.steps[3].layers[l].keys.shape[1], 1)
                doc = document_of(self.path("a.kvtrace"))["steps"]
                self.assertEqual(doc["reused_count"], [0, 0, 8, 0])
                self.assertEqual(doc["reused_from"], [-1, -1, 0, -1])
                self.assertEqual(doc["reused_blocks"], [None, None, [11, 12], None])
                if not snapshots:
                    self.assertEqual(doc["appended"][2], [11, 11])
                    self.assertEqual(doc["cache_lengths"][2], [11, 11])
                write_trace(t, self.path("b.kvtrace"))
                u = read_trace(self.path("b.kvtrace"))
                self.assertEqual([(s.reused_count, s.reused_from, s.reused_blocks) for s in u.steps],
                                 [(s.reused_count, s.reused_from, s.reused_blocks) for s in t.steps])
                self.assertEqual(document_of(self.path("b.kvtrace")), document_of(self.path("a.kvtrace")))

    def test_unknown_source_and_no_blocks(self):
        w, _ = prefix_writer(reused_from=-1, blocks=None)
        w.save(self.path("a.kvtrace"))
        t = read_trace(self.path("a.kvtrace"))
        self.assertEqual((t.steps[2].reused_count, t.steps[2].reused_from, t.steps[2].reused_blocks), (8, -1, None))
        self.assertEqual(document_of(self.path("a.kvtrace"))["steps"]["reused_blocks"], [None] * 4)

    def test_traces_without_hits_are_byte_identical(self):
        """No step reused anything: no reused_* column, and the file is the one a writer
        that knows nothing of prefix caching writes (the same bytes after a round trip)."""
        w, _ = prefix_writer(hit=False)
        w.save(self.path("plain.kvtrace"))
        doc = document_of(self.path("plain.kvtrace"))["steps"]
        for k in ("reused_count", "reused_from", "reused_blocks"):
            self.assertNotIn(k, doc)
        # Explicit zero / -1 / None arguments write the same bytes as leaving them out.
        w2, _ = prefix_writer(hit=False)
        for s in w2.steps:
            s.reused_count, s.reused_from, s.reused_blocks = 0, -1, None
        w2.save(self.path("zeros.kvtrace"))
        write_trace(read_trace(self.path("plain.kvtrace")), self.path("again.kvtrace"))
        with open(self.path("plain.kvtrace"), "rb") as f:
            plain = f.read()
        for other in ("zeros.kvtrace", "again.kvtrace"):
            with open(self.path(other), "rb") as f:
                self.assertEqual(f.read(), plain, other)
        # ...and a hit changes them (the comparison can fail).
        prefix_writer()[0].save(self.path("hit.kvtrace"))
        with open(self.path("hit.kvtrace"), "rb") as f:
            self.assertNotEqual(f.read(), plain)

    def test_info_mentions_the_hits(self):
        prefix_writer()[0].save(self.path("a.kvtrace"))
        text = cli.info(read_trace(self.path("a.kvtrace")), "a.kvtrace")
        self.assertIn("prefix cache: 1 hit, 8 entries reused", text)
        self.assertIn("8 prompt entries from the prefix cache (request 0)", text)
        prefix_writer(hit=False)[0].save(self.path("b.kvtrace"))
        self.assertNotIn("prefix cache", cli.info(read_trace(self.path("b.kvtrace")), "b.kvtrace"))

    def _rewrite(self, name, column, value, snapshots=False):
        """a.kvtrace with steps.<column>[2] set to `value` (the whole column created if absent)."""
        prefix_writer(snapshots=snapshots)[0].save(self.path("a.kvtrace"))
        t = read_trace(self.path("a.kvtrace"))
        columns, tensors = format_v2.pack(t, "F32")
        doc = document_of(self.path("a.kvtrace"))
        doc["steps"] = columns
        if value == "whole column":
            doc["steps"][column] = [0]
        else:
            doc["steps"][column][2] = value
        meta = {"format": "kvtrace", "kvtrace_version": "2", "kvtrace": json.dumps(doc)}
        write_safetensors(self.path(name), tensors, meta)
        return self.path(name)

    def test_bad_columns_name_the_file_and_field(self):
        cases = [("reused_count", -1, "steps.reused_count[2]"),
                 ("reused_count", 2.5, "steps.reused_count[2]"),
                 ("reused_count", (1 << 28) + 1, "steps.reused_count[2]"),
                 ("reused_from", 7, "steps.reused_from[2]"),
                 ("reused_from", -2, "steps.reused_from[2]"),
                 ("reused_from", "0", "steps.reused_from[2]"),
                 ("reused_blocks", [1, "x"], "steps.reused_blocks[2]"),
                 ("reused_blocks", 3, "steps.reused_blocks[2]"),
                 ("reused_count", "whole column", "steps.reused_count")]
        for column, value, field in cases:
            with self.subTest(column=column, value=value):
                path = self._rewrite("bad.kvtrace", column, value)
                with self.assertRaises(TraceError) as cm:
                    read_trace(path)
                self.assertEqual(cm.exception.field, field)
                self.assertEqual(cm.exception.file, path)
        # the unmodified file reads (the refusals come from the values above)
        read_trace(self._rewrite("good.kvtrace", "reused_from", 0))

    def test_more_reused_entries_than_records_are_refused(self):
        """The hit step (steps[2]) has 11 records per layer, the 8 reused rows first: 11 is the
        most it can have reused (a hit of the whole cache), 12 is refused, with records and
        with snapshots alone (records derived from them), as kvscope-cli does."""
        for snapshots in (False, True):
            with self.subTest(snapshots=snapshots):
                t = read_trace(self._rewrite("all.kvtrace", "reused_count", 11, snapshots))
                self.assertEqual([s.reused_count for s in t.steps], [0, 0, 11, 0])
                path = self._rewrite("over.kvtrace", "reused_count", 12, snapshots)
                with self.assertRaises(TraceError) as cm:
                    read_trace(path)
                self.assertEqual((cm.exception.file, cm.exception.field), (path, "steps.reused_count[2]"))
                self.assertIn("layer 0 of the step has 11 records", str(cm.exception))

    def test_writer_refuses_bad_arguments(self):
        w, _ = prefix_writer()
        k, v = records(3, 5)
        for kw in (dict(reused_count=-1), dict(reused_count=1.0), dict(reused_count=2, reused_from=5),
                   dict(reused_count=2, reused_from=True), dict(reused_count=2, reused_blocks=["a"]),
                   dict(reused_count=4)):  # 3 records cannot hold 4 reused rows first
            with self.subTest(**{key: repr(x) for key, x in kw.items()}):
                with self.assertRaises(ValueError):
                    w.add_step(request=1, step=2, fed_ids=[41], positions=[12], keys=k, values=v, **kw)
        w.add_step(request=1, step=2, fed_ids=[41], positions=[12], keys=k, values=v, reused_count=np.int64(2),
                   reused_from=np.int64(0), reused_blocks=np.array([3, 4]))
        self.assertEqual((w.steps[-1].reused_count, w.steps[-1].reused_from, w.steps[-1].reused_blocks), (2, 0, [3, 4]))


if __name__ == "__main__":
    unittest.main()
