"""DeepSeek runs of the independent engine (tests/independent/torch_mla.py: shares no code with
KV Scope's core) on the checkpoints transformers 5.17 wrote, audited with kvscope-cli: a clean
greedy run, a clean absorbed decode (the form serving engines decode with, which transformers
never uses) and an absorbed decode that reads kv_b_proj by halves (mla_absorb: what transformers
cannot show without a patch); then a cache of each head's decompressed K and V (what transformers
4.x caches: the trace says model.latent_records "heads"), clean and with one layer's records taken
from another (wrong_layer) -> expected and got finding, first step, layer. One table.

Run: /usr/bin/python3 -m unittest discover -s tests/scenarios -p "test_*.py"
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "independent"))
import foreign_runs as fr  # noqa: E402

try:
    import torch  # noqa: F401
    import record_run
    HAVE_TORCH = True
except ImportError:
    if os.environ.get("CI"):  # CI installs python3-torch (scripts/setup.sh)
        raise
    HAVE_TORCH = False

MODELS = os.path.join(REPO, "tests", "fixtures", "families", "models")
PROMPT = [5, 17, 300, 41, 99, 7, 250, 3]
RUNS = {  # name -> (bug, expectation)
    "clean": (None, fr.Expectation()),
    "absorbed decode": ("mla_absorbed", fr.Expectation()),
    "absorbed, kv_b_proj by halves at L1": ("mla_absorb:layer=1", fr.Expectation(["mla_absorb"], 1, 1)),
    "absorbed, by halves on every layer": ("mla_absorb", fr.Expectation(["mla_absorb"], 1, 0)),
    "decompressed heads cached": ("mla_heads", fr.Expectation()),
    "decompressed heads, L2 rows from L1 at s2": ("mla_heads+wrong_layer:layer=2,source=1,step=2",
                                                  fr.Expectation(["wrong_layer"], 2, 2)),
}
ROWS = [["engine", "model", "run", "expected", "got", "first", "result"]]


def tearDownModule():
    print("\nKV Scope audit on the independent engine's latent runs:\n" + fr.table(ROWS) + "\n")


@unittest.skipUnless(HAVE_TORCH and (os.path.exists(fr.cli_path()) or os.environ.get("CI")),
                     "needs python3-torch and a built kvscope-cli")
class IndependentLatentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvscope-latent-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_runs_of_both_deepseek_families(self):
        for model in ("deepseek_v2", "deepseek_v3"):
            for name, (bug, expect) in RUNS.items():
                with self.subTest(model=model, run=name):
                    out = os.path.join(self.tmp, f"{model}.{name.replace(' ', '_').replace(',', '')}.kvtrace")
                    record_run.record(os.path.join(MODELS, model), out, PROMPT, 6, bug=bug)
                    got = fr.audit(out, model=os.path.join(MODELS, model))
                    problems = got.problems(expect)
                    want = ", ".join(expect.findings) or "none"
                    if expect.first_step is not None:
                        want += f" @s{expect.first_step} L{expect.first_layer}"
                    ROWS.append(["torch_engine.py", model, name, want, ", ".join(got.roots) or got.error[:60] or "-",
                                 got.where(), "ok" if not problems else "FAIL"])
                    self.assertEqual(problems, [], f"{model} {name}")


if __name__ == "__main__":
    unittest.main()
