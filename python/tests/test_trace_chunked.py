"""Chunked prefill in version-2 traces (docs/trace-format.md): a request's prefill written as
several steps, every chunk but the last with chosen = -1 and no logits row, reads back as
written, survives a rewrite byte for byte, and `kvtrace info` names the chunks."""

import os
import tempfile
import unittest

import numpy as np

from kvscope_trace import TraceWriter, read_trace, write_trace
from kvscope_trace.cli import info

MODEL = {"architecture": "llama", "num_layers": 2, "num_kv_heads": 1, "head_dim": 4,
         "vocab_size": 50, "max_positions": 64}


def records(n, seed):
    rng = np.random.default_rng(seed)
    return ([rng.standard_normal((1, n, 4)).astype(np.float32) for _ in range(2)],
            [rng.standard_normal((1, n, 4)).astype(np.float32) for _ in range(2)])


def chunked_writer():
    """Prompt [1..5] prefilled in chunks of 2 (steps 0, 1, 2), then token 7 fed at step 3."""
    w = TraceWriter(model=dict(MODEL))
    w.add_request(0, prompt_ids=[1, 2, 3, 4, 5], generated=[7, 8], max_new_tokens=2)
    logits = np.zeros(50, np.float32)
    for step, (fed, pos) in enumerate((([1, 2], [0, 1]), ([3, 4], [2, 3]), ([5], [4]))):
        k, v = records(len(fed), step)
        last = step == 2
        w.add_step(request=0, step=step, fed_ids=fed, positions=pos, chosen=7 if last else -1,
                   logits=logits if last else None, keys=k, values=v,
                   events=["arrival"] if step == 0 else [])
    k, v = records(1, 3)
    w.add_step(request=0, step=3, fed_ids=[7], positions=[5], chosen=8, logits=logits, keys=k,
               values=v)
    return w


class ChunkedPrefill(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvtrace-chunked-")

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_chunks_read_back_and_rewrite_byte_for_byte(self):
        chunked_writer().save(self.path("a.kvtrace"))
        t = read_trace(self.path("a.kvtrace"))
        self.assertEqual([s.step for s in t.steps], [0, 1, 2, 3])
        self.assertEqual([s.chosen for s in t.steps], [-1, -1, 7, 8])
        self.assertEqual([s.logits is None for s in t.steps], [True, True, False, False])
        self.assertEqual([s.positions for s in t.steps], [[0, 1], [2, 3], [4], [5]])
        self.assertEqual([l.cache_length for l in t.steps[2].layers], [5, 5])
        write_trace(t, self.path("b.kvtrace"))
        with open(self.path("a.kvtrace"), "rb") as a, open(self.path("b.kvtrace"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_info_names_the_chunks(self):
        chunked_writer().save(self.path("a.kvtrace"))
        text = info(read_trace(self.path("a.kvtrace")), "a.kvtrace")
        self.assertIn("4 steps, prefill in 3 chunks", text)


if __name__ == "__main__":
    unittest.main()
