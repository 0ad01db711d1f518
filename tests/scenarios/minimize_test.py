"""kvscope-cli audit --minimize on every transformers-recorded scenario (and on a trace+trace
pair and a built-in engine run): the minimized trace must give the same first root finding
(id, request, step, layer), the same first divergence, and be much smaller; --markdown and
--json give the command that reproduces it, and running that command gives the verdict.
Prints one table of the sizes before and after.

Run: /usr/bin/python3 -m unittest discover -s tests/scenarios -p "minimize_test.py" (CTest
python_minimize)
(needs numpy and a built kvscope-cli; $KVSCOPE_CLI names it).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import foreign_runs as fr  # noqa: E402
import scenario_to_trace  # noqa: E402

MODELS = os.path.join(REPO, "tests", "fixtures", "hf", "models")
SCENARIOS = os.path.join(REPO, "tests", "fixtures", "hf", "scenarios")
ROWS = [["scenario", "mode", "finding", "first", "bytes before", "bytes after", "ratio", "kept"]]
# Runs whose first divergence is their last step leave nothing to cut but snapshots.
MUCH_SMALLER = 0.5


def cli(*args, cwd=None):
    return subprocess.run([fr.cli_path(), *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def first_root(report):
    for f in report["findings"]:
        if f["id"] != "drift" and not f.get("caused_by"):
            return f
    return None


def key(report):
    f = first_root(report)
    d = report["first_divergence"]
    return (f["id"], f["where"]["request"], f["where"]["step"], f["where"]["layer"],
            d["request"], d["step"], d["layer"])


def tearDownModule():
    if len(ROWS) > 1:
        print("\n" + fr.table(ROWS), file=sys.stderr)


@unittest.skipUnless(os.path.exists(fr.cli_path()) or os.environ.get("CI"), "kvscope-cli is not built")
class MinimizeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvscope-minimize-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def minimize(self, name, mode_args, ref_args_after=None):
        """Audits with --minimize, re-audits the minimized trace, compares, records a row."""
        out = os.path.join(self.tmp, name + ".min.kvtrace")
        md = os.path.join(self.tmp, name + ".md")
        p = cli("audit", *mode_args, "--minimize", out, "--markdown", md, "--json", "--force")
        self.assertEqual(p.returncode, 1, p.stderr)
        full = json.loads(p.stdout)
        m = full["minimized"]
        self.assertEqual(m["trace"], out)
        with open(md, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("## Minimal reproducer", text)
        self.assertIn(m["command"], text)
        # The printed command, run as given, reproduces the verdict.
        argv = shlex.split(m["command"])
        self.assertEqual(argv[:2], ["kvscope-cli", "audit"])
        again = cli("audit", *argv[2:], "--json")
        self.assertEqual(again.returncode, 1, again.stderr)
        small = json.loads(again.stdout)
        self.assertEqual(key(small), key(full), f"{name}: the minimized trace shows another first finding")
        self.assertEqual(first_root(small)["id"], m["finding"]["id"])
        before, after = m["bytes_before"], m["bytes_after"]
        self.assertEqual(after, sum(os.path.getsize(x) for x in (m["trace"], m["reference_trace"]) if x))
        ratio = after / before
        f = first_root(full)
        ROWS.append([name, full["mode"], f["id"], f"r{f['where']['request']} s{f['where']['step']} L{f['where']['layer']}",
                     str(before), str(after), f"{ratio:.3f}", m["kept"]])
        return full, small, m, ratio

    def test_every_scenario(self):
        names = sorted(n[:-5] for n in os.listdir(SCENARIOS) if n.endswith(".json"))
        tried = 0
        for name in names:
            with self.subTest(scenario=name):
                with open(os.path.join(SCENARIOS, name + ".json"), encoding="utf-8") as f:
                    doc = json.load(f)
                model = os.path.join(MODELS, {"gpt2-updated": "gpt2"}.get(doc["model"], doc["model"]))
                trace = os.path.join(self.tmp, name + ".kvtrace")
                scenario_to_trace.convert(os.path.join(SCENARIOS, name + ".json"), model, trace)
                args = ["--model", model, "--trace", trace]
                if doc["model"] == "gpt2-updated":
                    args += ["--weights-version", "1=" + os.path.join(MODELS, "gpt2-updated")]
                audit = cli("audit", *args, "--json")
                if audit.returncode == 0:  # clean runs (and the torch-sampled one alone): nothing to minimize
                    p = cli("audit", *args, "--minimize", os.path.join(self.tmp, name + ".none.kvtrace"))
                    self.assertEqual(p.returncode, 0, p.stderr)
                    self.assertIn("nothing written", p.stderr)
                    self.assertFalse(os.path.exists(os.path.join(self.tmp, name + ".none.kvtrace")))
                    continue
                tried += 1
                full, _, m, ratio = self.minimize(name, args)
                steps = [s for s in full["steps"] if s["request"] == first_root(full)["where"]["request"]]
                if first_root(full)["where"]["step"] < max(s["step"] for s in steps) or m["kept"].find("no snapshots") >= 0:
                    self.assertLess(ratio, MUCH_SMALLER, f"{name}: {m['kept']}")
                else:
                    self.assertLessEqual(ratio, 1.0, f"{name}: {m['kept']}")
        self.assertGreaterEqual(tried, 10, "the divergent scenarios")

    def test_trace_pair_keeps_both_sides(self):
        pair = {}
        for name in ("gpt2.rng_same_order", "gpt2.rng_extra_draw"):
            pair[name] = os.path.join(self.tmp, name + ".pair.kvtrace")
            scenario_to_trace.convert(os.path.join(SCENARIOS, name + ".json"), os.path.join(MODELS, "gpt2"), pair[name])
        full, small, m, ratio = self.minimize("rng_extra_draw vs rng_same_order",
                                              ["--reference-trace", pair["gpt2.rng_same_order"],
                                               "--trace", pair["gpt2.rng_extra_draw"]])
        self.assertEqual(first_root(full)["id"], "rng_order")
        self.assertTrue(m["reference_trace"].endswith(".reference.kvtrace"), m)
        self.assertIn("--reference-trace", m["command"])
        self.assertLess(ratio, MUCH_SMALLER)

    def test_engine_run_and_bundle(self):
        demo = os.path.join(self.tmp, "demo")
        self.assertEqual(cli("make-demo", demo).returncode, 0)
        args = ["--model", demo, "--prompt", "The cache must hold exactly one record per layer and position.",
                "--prompt", "A second request arrives.", "--arrival", "0", "--arrival", "3", "--max-new", "12",
                "--fault", "wrong_layer:layer=2,source=1", "--fault", "cross_request:request=1,victim=0"]
        full, small, m, ratio = self.minimize("demo (built-in engine)", args)
        self.assertEqual(first_root(full)["id"], "wrong_layer")
        self.assertLess(ratio, MUCH_SMALLER)
        self.assertIn("cross_request", m["not_shown"])
        bundle = os.path.join(self.tmp, "bundle")
        p = cli("audit", *args, "--export-bundle", bundle)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(sorted(os.listdir(bundle)), ["minimized.kvtrace", "report.json", "reproduce.sh", "summary.md"])
        with open(os.path.join(bundle, "report.json"), encoding="utf-8") as f:
            report = json.load(f)
        self.assertEqual(report["minimized"]["trace"], os.path.join(bundle, "minimized.kvtrace"))
        with open(os.path.join(bundle, "summary.md"), encoding="utf-8") as f:
            self.assertIn("--trace minimized.kvtrace", f.read())
        # reproduce.sh runs from anywhere: it changes into the bundle folder.
        r = subprocess.run(["sh", os.path.join(bundle, "reproduce.sh"), "--json"], capture_output=True, text=True,
                           timeout=600, cwd=self.tmp, env={**os.environ, "KVSCOPE_CLI": fr.cli_path()})
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(key(json.loads(r.stdout)), key(full))
        p = cli("audit", *args, "--export-bundle", bundle)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--force", p.stderr)


if __name__ == "__main__":
    unittest.main()
