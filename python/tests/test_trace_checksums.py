#!/usr/bin/env python3
"""Cache checksums (docs/trace-format.md, "Checksums"): XXH3-64 of a layer's cache row as the
file stores it, read back as float32. The writer computes them only with the optional xxhash
module; CTest runs this suite with it (python_trace_package, KVSCOPE_TRACE_XXHASH=1) and
without it (python_trace_package_no_xxhash, KVSCOPE_TRACE_XXHASH=0).

    VENV/bin/python -m unittest discover -s python/tests -p test_trace_checksums.py
"""

import os
import unittest

import numpy as np

from kvscope_trace import trace as kvtrace
from test_trace import TempDir, small_writer

MODE = os.environ.get("KVSCOPE_TRACE_XXHASH", "")


def stored(path):
    """Per step with checksums, per layer: (key, value) checksums the file holds, and those
    of the snapshot as the file stores it (what the audit rebuilds and hashes)."""
    t = kvtrace.read_trace(path)
    return [([(r.checksum_k, r.checksum_v) for r in s.layers],
             [(kvtrace.cache_checksum(r.cache_keys), kvtrace.cache_checksum(r.cache_values))
              if r.cache_keys is not None else None for r in s.layers])
            for s in t.steps if s.layers and s.layers[0].checksum_k]


def records_only(w):
    """The writer's steps without snapshots, keeping the checksums taken of them (what an
    engine that hashes its own cache hands the writer)."""
    for s in w.steps:
        for r in s.layers:
            r.cache_keys = r.cache_values = None
    return w


class Environment(TempDir, unittest.TestCase):
    def test_the_module_is_there_as_the_run_says(self):
        """Each CTest run really runs the way it says: with KVSCOPE_TRACE_XXHASH=0 the writer
        does not take the module even where it is installed, with =1 it has it."""
        if MODE == "0":
            self.assertFalse(kvtrace.HAVE_XXHASH)
        elif MODE == "1" or os.environ.get("CI"):  # CI installs python3-xxhash (scripts/setup.sh)
            self.assertTrue(kvtrace.HAVE_XXHASH)
        path = self.path("t.kvtrace")
        small_writer(snapshots=True).save(path)
        self.assertEqual(kvtrace._Container(path).entries.get("checksums") is not None, kvtrace.HAVE_XXHASH)
        self.assertEqual(len(stored(path)), 5 if kvtrace.HAVE_XXHASH else 0)


@unittest.skipUnless(kvtrace.HAVE_XXHASH, "needs the xxhash module (the run with KVSCOPE_TRACE_XXHASH=1)")
class ReducedPrecision(TempDir, unittest.TestCase):
    def test_checksums_hash_the_stored_snapshot(self):
        """F16 / BF16 files: each checksum is the hash of the snapshot as stored (rounded),
        not of the float32 values the writer was given."""
        for dtype in ("F32", "F16", "BF16"):
            with self.subTest(dtype=dtype):
                path = self.path(f"snap-{dtype}.kvtrace")
                small_writer(dtype=dtype, snapshots=True).save(path)
                rows = stored(path)
                self.assertEqual(len(rows), 5)
                for sums, want in rows:
                    self.assertEqual(sums, want)

    def test_rewriting_in_f16_recomputes_and_leaves_the_trace_alone(self):
        f32, f16 = self.path("a.kvtrace"), self.path("a16.kvtrace")
        small_writer(snapshots=True).save(f32)
        t = kvtrace.read_trace(f32)
        before = [(r.checksum_k, r.checksum_v) for s in t.steps for r in s.layers]
        kvtrace.write_trace(t, f16, dtype="F16")
        self.assertEqual([(r.checksum_k, r.checksum_v) for s in t.steps for r in s.layers], before)
        rows = stored(f16)
        self.assertEqual(len(rows), 5)
        self.assertTrue(all(sums == want for sums, want in rows))
        self.assertNotEqual([p for sums, _ in rows for p in sums], before)  # rounding changed them

    def test_engine_checksums_without_snapshots(self):
        """Checksums an engine took of its float32 cache: kept in F32; in F16 left out where
        rounding changes the records (they cover values the file does not store); kept where
        the records are exact in the storage type (a bfloat16 cache stored as BF16)."""
        given = [(r.checksum_k, r.checksum_v) for s in small_writer(snapshots=True).steps for r in s.layers]
        for dtype in ("F32", "F16"):
            with self.subTest(dtype=dtype):
                path = self.path(f"rec-{dtype}.kvtrace")
                records_only(small_writer(dtype=dtype, snapshots=True)).save(path)
                got = [p for sums, _ in stored(path) for p in sums]
                self.assertEqual(got, given if dtype == "F32" else [])
        w = small_writer(dtype="BF16", snapshots=True)
        for s in w.steps:  # a bfloat16 engine: every value is a bfloat16
            for r in s.layers:
                for a in (r.keys, r.values, r.cache_keys, r.cache_values):
                    a[...] = (a.view(np.uint32) & 0xFFFF0000).view(np.float32)
                r.checksum_k, r.checksum_v = kvtrace.cache_checksum(r.cache_keys), kvtrace.cache_checksum(r.cache_values)
        given = [(r.checksum_k, r.checksum_v) for s in w.steps for r in s.layers]
        path = self.path("rec-bf16.kvtrace")
        records_only(w).save(path)
        self.assertEqual([p for sums, _ in stored(path) for p in sums], given)
        # one value that BF16 rounds: its request's checksums from that step on are left out
        w.steps[2].layers[1].keys[0, 0, 0] = np.float32(1.0 + 2 ** -10)
        records_only(w).save(path)
        kept = [s.request for s in kvtrace.read_trace(path).steps if s.layers and s.layers[0].checksum_k]
        self.assertEqual(kept, [0, 1, 1, 1])  # steps 0, 1, 3, 4: request 0's step 2 lost them


if __name__ == "__main__":
    unittest.main()
