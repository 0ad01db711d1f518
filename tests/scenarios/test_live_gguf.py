"""GGUF checkpoints made by llama.cpp's own converter (convert_hf_to_gguf.py, the copy
scripts/live-python.sh --llama-cpp fetches, run through gguf_convert.py) from the families
KV Scope and llama.cpp share: the Llama fixture (its q/k rows permuted by the converter), a
Llama 3 variant (rope_freqs), the Qwen3 fixture (q/k norms), make-demo's Qwen2 (biases) and
Mistral (converted as llama): the Llama fixture as F32, F16, BF16 and Q8_0, the others as F32
and Q8_0 (the float conversions are one code path in the converter and in KV Scope; the CI
budget keeps them to one family). For every file:
  - KV Scope's reference logits equal transformers' own GGUF loader running the same file
    (from_pretrained(gguf_file=...), which dequantises and un-permutes), within 1e-4;
  - a run that transformers records from the GGUF (kvscope-record --model FILE.gguf, greedy)
    audits clean against the GGUF, and the F32 file's HF twin's run against the F32 file.
Two limits of transformers' GGUF loader change the oracle: it ignores rope_freqs (Llama 3's
scaling: its run of the file is not the model, and the audit says `reference`), so the
Llama 3 variant is checked as F32 against transformers running the HF checkpoint; and it
does not read Qwen3's head_dim, so Qwen3's config is given (the HF one, without the sliding
window llama.cpp's Qwen3 drops: the file has no such key).

Needs the live virtualenv (transformers, torch) with the folder of live-python.sh --llama-cpp:
KVSCOPE_LLAMA_CPP=<that folder>, its site/ on PYTHONPATH (gguf, accelerate, sentencepiece).
CI runs it as ctest python_live_gguf; without them the suite is skipped (and says so).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
import foreign_runs as fr  # noqa: E402
import gguf_convert  # noqa: E402

LLAMA_CPP = os.environ.get("KVSCOPE_LLAMA_CPP", "")
try:
    import gguf  # noqa: F401  transformers' GGUF loader reads through it
    import torch
    import transformers
    from kvscope_trace import hf_trace
except ImportError as e:
    raise unittest.SkipTest(f"needs transformers, torch and gguf ({e})")
if not os.path.isfile(os.path.join(LLAMA_CPP, "llama.cpp", "convert_hf_to_gguf.py")):
    raise unittest.SkipTest("needs KVSCOPE_LLAMA_CPP: the folder scripts/live-python.sh --llama-cpp prints")

PROMPT = [5, 17, 300, 41, 99, 7, 12, 250, 3, 64]
# The others: f32 and q8_0. The Llama 3 variant: f32 only (its oracle is the HF checkpoint).
OUTTYPES = {"llama": ("f32", "f16", "bf16", "q8_0"), "llama3": ("f32",)}
TABLE = []


def tearDownModule():
    if TABLE:
        head = ("file", "KV Scope vs transformers' GGUF loader", "audit of transformers' run")
        widths = [max(len(str(r[i])) for r in TABLE + [head]) for i in range(3)]
        line = lambda r: "  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        print(f"\nllama.cpp's converter -> KV Scope, transformers {transformers.__version__}:\n" + line(head) +
              "\n" + "\n".join(line(r) for r in TABLE))


def convert(model: str, outtype: str, out: str) -> None:
    gguf_convert.convert(os.path.join(LLAMA_CPP, "llama.cpp"), model, outtype, out)


class ConvertedByLlamaCppTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.tmp.name
        llama3 = os.path.join(root, "llama3")
        import shutil
        shutil.copytree(os.path.join(REPO, "tests", "fixtures", "hf", "models", "llama"), llama3)
        with open(os.path.join(llama3, "config.json")) as f:
            cfg = json.load(f)
        cfg.pop("rope_parameters", None)
        cfg["rope_theta"] = 10000.0
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
        with open(os.path.join(llama3, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        demo = {}
        for arch in ("qwen2", "mistral"):
            demo[arch] = os.path.join(root, "demo-" + arch)
            subprocess.run([fr.cli_path(), "make-demo", "--arch", arch, demo[arch]], check=True, capture_output=True)
        cls.models = {
            "llama": os.path.join(REPO, "tests", "fixtures", "hf", "models", "llama"),
            "llama3": llama3,
            "qwen3": os.path.join(REPO, "tests", "fixtures", "families", "models", "qwen3"),
            **demo,
        }

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def kvscope_logits(self, gguf_path: str):
        r = subprocess.run([fr.cli_path(), "reference", "--model", gguf_path, "--ids", ",".join(map(str, PROMPT)),
                            "--json"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return torch.tensor(json.loads(r.stdout)["last_logits"])

    def audit(self, model: str, trace: str) -> tuple:
        r = subprocess.run([fr.cli_path(), "audit", "--model", model, "--trace", trace, "--json"],
                           capture_output=True, text=True)
        rep = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
        return r.returncode, [f["id"] for f in rep.get("findings", [])], r.stderr

    def oracle(self, family: str, name: str):
        """transformers' logits for the file's model: its GGUF loader, or (Llama 3) the HF
        checkpoint; None where neither computes the file's model."""
        if family == "llama3":
            if not name.endswith("-f32.gguf"):
                return None
            hf = transformers.AutoModelForCausalLM.from_pretrained(self.models[family], dtype=torch.float32)
        else:
            kw = {}
            if family == "qwen3":
                cfg = transformers.AutoConfig.from_pretrained(self.models[family])
                cfg.use_sliding_window, cfg.sliding_window = False, None
                cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
                kw["config"] = cfg
            hf = transformers.AutoModelForCausalLM.from_pretrained(self.tmp.name, gguf_file=name,
                                                                   dtype=torch.float32, **kw)
        with torch.no_grad():
            return hf.eval()(torch.tensor([PROMPT])).logits[0, -1]

    def test_every_converted_file_computes_what_transformers_computes_from_it(self):
        for family, model in self.models.items():
            for outtype in OUTTYPES.get(family, ("f32", "q8_0")):
                name = f"{family}-{outtype}.gguf"
                with self.subTest(file=name):
                    path = os.path.join(self.tmp.name, name)
                    convert(model, outtype, path)
                    want = self.oracle(family, name)
                    if want is None:
                        TABLE.append((name, "not checked: transformers' GGUF loader ignores rope_freqs", "-"))
                        continue
                    got = self.kvscope_logits(path)
                    err = float((got - want).abs().max())
                    tol = 1e-4 + 1e-5 * float(want.abs().max())
                    audits = []
                    # The run transformers records from the same file (not where its GGUF
                    # loader cannot build the file's model by itself: above).
                    if family not in ("llama3", "qwen3"):
                        trace = os.path.join(self.tmp.name, name + ".kvtrace")
                        self.assertEqual(hf_trace.main(["--model", path, "--prompt-ids", ",".join(map(str, PROMPT)),
                                                        "--max-new", "6", "--ignore-eos", "--out", trace]), 0)
                        rc, ids, stderr = self.audit(path, trace)
                        audits.append(f"GGUF: exit {rc} {ids or 'clean'}")
                        self.assertEqual(rc, 0, stderr + str(ids))
                    # The F32 file holds the HF checkpoint's weights: its run audits clean
                    # against the file. Not Mistral's (the file says llama: the audit refuses a
                    # mistral trace, as it should) nor Qwen3's (its HF twin slides, the file
                    # does not).
                    if outtype == "f32" and family not in ("mistral", "qwen3"):
                        t2 = os.path.join(self.tmp.name, name + ".hf.kvtrace")
                        self.assertEqual(hf_trace.main(["--model", model, "--prompt-ids", ",".join(map(str, PROMPT)),
                                                        "--max-new", "6", "--ignore-eos", "--no-fingerprint",
                                                        "--out", t2]), 0)
                        rc2, ids2, stderr2 = self.audit(path, t2)
                        audits.append(f"HF run vs GGUF: exit {rc2} {ids2 or 'clean'}")
                        self.assertEqual(rc2, 0, stderr2 + str(ids2))
                    TABLE.append((name, f"max error {err:.2e} (tolerance {tol:.1e})", "; ".join(audits)))
                    self.assertLessEqual(err, tol)


if __name__ == "__main__":
    unittest.main()
