"""Speculative decoding in version-2 traces: the draft_count / accepted_count step columns
(docs/trace-format.md) written, read back, validated, and the cache lengths the reader
derives for a step whose rejected drafts were rolled back."""

import json
import os
import tempfile
import unittest

import numpy as np

from kvscope_trace import TraceError, TraceWriter, read_trace, write_trace
from kvscope_trace import format_v2

MODEL = {"architecture": "llama", "num_layers": 2, "num_kv_heads": 1, "head_dim": 4,
         "vocab_size": 50, "max_positions": 64}


def records(n, seed):
    rng = np.random.default_rng(seed)
    return ([rng.standard_normal((1, n, 4)).astype(np.float32) for _ in range(2)],
            [rng.standard_normal((1, n, 4)).astype(np.float32) for _ in range(2)])


def speculative_writer(cache_lengths=None):
    """Prompt [1, 2, 3]; step 1 feeds 7 + drafts [8, 9, 10], accepts 8 (bonus 11); step 2
    feeds 11."""
    w = TraceWriter(model=dict(MODEL))
    w.add_request(0, prompt_ids=[1, 2, 3], generated=[7, 8, 11, 12], max_new_tokens=4)
    logits = np.zeros(50, np.float32)
    k, v = records(3, 0)
    w.add_step(request=0, step=0, fed_ids=[1, 2, 3], positions=[0, 1, 2], chosen=7, logits=logits,
               keys=k, values=v)
    k, v = records(4, 1)
    w.add_step(request=0, step=1, fed_ids=[7, 8, 9, 10], positions=[3, 4, 5, 6], chosen=11,
               logits=logits, keys=k, values=v, draft_count=3, accepted_count=1,
               cache_lengths=cache_lengths)
    k, v = records(1, 2)
    w.add_step(request=0, step=2, fed_ids=[11], positions=[5], chosen=12, logits=logits,
               keys=k, values=v)
    return w


class SpeculativeColumns(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvtrace-spec-")

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_round_trip_keeps_drafts_and_acceptance(self):
        w = speculative_writer()
        w.save(self.path("a.kvtrace"))
        t = read_trace(self.path("a.kvtrace"))
        self.assertEqual([(s.draft_count, s.accepted_count) for s in t.steps], [(0, 0), (3, 1), (0, 0)])
        self.assertEqual(t.steps[1].rejected_count(), 2)
        self.assertEqual(t.steps[1].real_fed_count(), 2)
        write_trace(t, self.path("b.kvtrace"))
        u = read_trace(self.path("b.kvtrace"))
        self.assertEqual([(s.draft_count, s.accepted_count) for s in u.steps],
                         [(s.draft_count, s.accepted_count) for s in t.steps])
        cols = format_v2.columns_of(t)[0]
        self.assertEqual(cols["draft_count"], [0, 3, 0])
        self.assertEqual(cols["accepted_count"], [0, 1, 0])

    def test_rolled_back_cache_lengths_by_default(self):
        # writer and reader both assume the rejected drafts were rolled back: 3 + 4 - 2 = 5
        w = speculative_writer()
        w.save(self.path("c.kvtrace"))
        doc = json.loads(_metadata(self.path("c.kvtrace"))["kvtrace"])
        self.assertEqual(doc["steps"]["cache_lengths"][1], [5, 5])
        t = read_trace(self.path("c.kvtrace"))
        self.assertEqual([l.cache_length for l in t.steps[1].layers], [5, 5])
        self.assertEqual([l.cache_length for l in t.steps[2].layers], [6, 6])
        # a skipped rollback is recorded as what the engine held
        speculative_writer(cache_lengths=[7, 7]).save(self.path("d.kvtrace"))
        self.assertEqual([l.cache_length for l in read_trace(self.path("d.kvtrace")).steps[1].layers], [7, 7])

    def test_traces_without_drafts_write_no_draft_columns(self):
        w = TraceWriter(model=dict(MODEL))
        w.add_request(0, prompt_ids=[1, 2], generated=[3], max_new_tokens=1)
        w.add_step(request=0, step=0, fed_ids=[1, 2], positions=[0, 1], chosen=3,
                   logits=np.zeros(50, np.float32))
        w.save(self.path("e.kvtrace"))
        steps = json.loads(_metadata(self.path("e.kvtrace"))["kvtrace"])["steps"]
        self.assertNotIn("draft_count", steps)
        self.assertNotIn("accepted_count", steps)
        self.assertEqual(read_trace(self.path("e.kvtrace")).steps[0].draft_count, 0)

    def test_bad_counts_name_the_field(self):
        speculative_writer().save(self.path("f.kvtrace"))
        for column, value, field in (("accepted_count", 4, "steps.accepted_count[1]"),
                                     ("draft_count", 9, "steps.draft_count[1]")):
            out = self.path(column + ".kvtrace")
            _rewrite(self.path("f.kvtrace"), out, lambda d: d["steps"][column].__setitem__(1, value))
            with self.assertRaises(TraceError) as e:
                read_trace(out)
            self.assertIn(field, str(e.exception))
        with self.assertRaises(ValueError):
            w = speculative_writer()
            w.add_step(request=0, step=3, fed_ids=[12, 13], positions=[6, 7], draft_count=1,
                       accepted_count=2)


def _metadata(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))["__metadata__"]


def _rewrite(src, dst, edit):
    with open(src, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    doc = json.loads(header["__metadata__"]["kvtrace"])
    edit(doc)
    header["__metadata__"]["kvtrace"] = json.dumps(doc)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(dst, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw + data)


if __name__ == "__main__":
    unittest.main()
