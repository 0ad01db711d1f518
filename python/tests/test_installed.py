"""The installed kvscope-trace package as a user gets it: where it is imported from, its
console commands (`kvtrace`, `kvscope-record`), and a run of the independent PyTorch engine
(tests/independent, which shares no code with KV Scope) recorded through the package's API
and audited with kvscope-cli.

run_installed.sh sets KVSCOPE_TRACE_INSTALLED=1 (the package must come from the virtualenv,
not from the source folder) and KVSCOPE_CLI; without them the checks that need them skip.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import kvscope_trace
from test_trace import FIXTURES, REPO, TempDir, small_writer

INSTALLED = os.environ.get("KVSCOPE_TRACE_INSTALLED") == "1"
CLI = os.environ.get("KVSCOPE_CLI", "")
BIN = os.path.dirname(sys.executable)
LLAMA = os.path.join(FIXTURES, "hf", "models", "llama")
PROMPT = [0, 34, 86, 69, 301, 291, 938, 1014, 303, 435, 856, 276, 781, 90, 996, 15]

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    if os.environ.get("CI"):  # CI installs python3-torch (scripts/setup.sh): a skip there hides a break
        raise
    HAVE_TORCH = False


def run(*cmd, timeout=300):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)


@unittest.skipUnless(INSTALLED, "KVSCOPE_TRACE_INSTALLED=1 is set by run_installed.sh")
class Installed(TempDir, unittest.TestCase):
    def test_imported_from_the_virtualenv_not_the_source(self):
        where = os.path.realpath(kvscope_trace.__file__)
        self.assertTrue(where.startswith(os.path.realpath(sys.prefix) + os.sep), where)
        self.assertNotEqual(os.path.dirname(os.path.dirname(where)), os.path.realpath(os.path.join(REPO, "python")))
        self.assertNotEqual(sys.prefix, sys.base_prefix, "not a virtualenv")

    def test_public_api(self):
        for name in kvscope_trace.__all__:
            self.assertTrue(hasattr(kvscope_trace, name), name)
        self.assertIs(kvscope_trace.TraceWriter, kvscope_trace.trace.TraceWriter)

    def test_kvtrace_command(self):
        a, b = self.path("a.kvtrace"), self.path("b.kvtrace")
        small_writer(snapshots=True).save(a)
        kvtrace = os.path.join(BIN, "kvtrace")
        p = run(kvtrace, "info", a)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("requests: 2, steps: 5, snapshots: yes", p.stdout)
        p = run(kvtrace, "roundtrip", a, b, "--dtype", "BF16")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(kvscope_trace.read_trace(b).stored_dtypes, ["BF16"])
        p = run(kvtrace, "fingerprint", LLAMA)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), kvscope_trace.model_fingerprint(LLAMA))
        p = run(kvtrace, "--version")
        self.assertIn(kvscope_trace.__version__, p.stdout)
        p = run(sys.executable, "-m", "kvscope_trace", "info", b)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(a, "r+b") as f:
            f.truncate(200)
        p = run(kvtrace, "info", a)
        self.assertEqual(p.returncode, 2)
        self.assertIn(a, p.stderr)

    def test_kvscope_record_command(self):
        p = run(os.path.join(BIN, "kvscope-record"), "--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--model", p.stdout)
        self.assertIn("--uncached", p.stdout)

    @unittest.skipUnless(CLI, "KVSCOPE_CLI not set")
    def test_cpp_reader_judges_what_the_package_rewrites(self):
        """kvscope-cli's own trace, rewritten by the installed `kvtrace`, audits clean."""
        src, dst = self.path("engine.kvtrace"), self.path("rewritten.kvtrace")
        p = run(CLI, "generate", "--model", LLAMA, "--ids", "0,34,86", "--max-new", "4", "--trace", src)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run(os.path.join(BIN, "kvtrace"), "roundtrip", src, dst)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run(CLI, "audit", "--model", LLAMA, "--trace", dst, "--json")
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout[:300])


@unittest.skipUnless(INSTALLED and CLI and HAVE_TORCH, "needs the installed package, KVSCOPE_CLI and torch")
class IndependentEngineThroughThePackage(unittest.TestCase):
    """A researcher's loop: their engine (here tests/independent), the package's writer or
    recorder, then kvscope-cli audit."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(REPO, "tests", "independent"))  # the engine, not the package
        global record_run, torch_model
        import record_run
        import torch_model
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def audit(self, trace, *extra):
        p = run(CLI, "audit", "--model", LLAMA, "--trace", trace, "--json", *extra)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        rep = json.loads(p.stdout)
        return p.returncode, [f for f in rep["findings"] if f["id"] != "drift"], rep

    def test_engine_uses_the_installed_package(self):
        self.assertIs(record_run.kvtrace, kvscope_trace)

    def test_writer_clean_and_wrong_layer(self):
        out = os.path.join(self.tmp.name, "clean.kvtrace")
        record_run.record(LLAMA, out, PROMPT, 6, dtype="bfloat16")
        rc, findings, rep = self.audit(out)
        self.assertEqual((rc, findings), (0, []), rep.get("verdict"))
        out = os.path.join(self.tmp.name, "wrong_layer.kvtrace")
        record_run.record(LLAMA, out, PROMPT, 6, bug="wrong_layer:layer=2,source=1,step=3")
        rc, findings, rep = self.audit(out)
        self.assertEqual(rc, 1)
        self.assertEqual([f["id"] for f in findings if not f.get("caused_by")], ["wrong_layer"])
        self.assertEqual((rep["first_divergence"]["step"], rep["first_divergence"]["layer"]), (3, 2))

    def test_recorder_decode_loop(self):
        """kvscope_trace.hf_trace's recorder over the engine's forward (a transformers 4
        style cache: key_cache / value_cache lists)."""
        from kvscope_trace import hf_trace
        model = torch_model.Model(LLAMA, "float32")
        L = model.cfg.num_layers
        state = {}

        class Cache:  # what a transformers 4 DynamicCache shows the recorder
            key_cache = property(lambda self: state["store"].keys)
            value_cache = property(lambda self: state["store"].values)

        def forward(ids, positions, cache):
            if cache is None:
                state["store"] = torch_model.KVCache(L)
            logits = model.forward(list(ids), list(positions), state["store"])
            return logits[-1], Cache()

        info = model.model_info(fingerprint=kvscope_trace.model_fingerprint(LLAMA),
                                stored_dtype=kvscope_trace.model_stored_dtype(LLAMA))
        rec = hf_trace.TraceRecorder(info)
        hf_trace.decode(forward, rec, 0, PROMPT, 6, policy={"temperature": 0.9, "seed": 3},
                        max_positions=model.cfg.max_positions)
        out = os.path.join(self.tmp.name, "recorded.kvtrace")
        rec.save(out)
        t = kvscope_trace.read_trace(out)
        self.assertEqual(len(t.steps), 6)
        self.assertTrue(np.isfinite(t.steps[0].logits).all())
        rc, findings, rep = self.audit(out)
        self.assertEqual((rc, findings), (0, []), rep.get("verdict"))


if __name__ == "__main__":
    unittest.main()
