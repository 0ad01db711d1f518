"""DeepSeek V3 and V2 recorded from real transformers 5 and audited against the checkpoints
transformers wrote (tests/fixtures/families/models/deepseek_v3 and deepseek_v2: multi-head latent
attention, a latent of 32 and a roped key part of 8 per token, V3's de-interleaved and V2's turned
in place; experts in groups, V3's by sigmoid score, V2's by softmax probability).

transformers 5 caches each token's latent row and roped key part (keys [B, 1, t, 32], values
[B, 1, t, 8]) and decompresses every head's key and value through kv_b_proj at each forward: the
trace records the latent rows, and a generate wrapped in recording() audits clean. A decode path
whose decompression (or absorbed weights) reads kv_b_proj in the wrong layout, every head's key
rows then every head's value rows (patched into transformers' expand_kv for one-token forwards:
the prefill stays right), is `mla_absorb` at the first decode step, at the layer whose attention
it changed, with every latent row of that layer exact.

transformers 4.57 caches the decompressed per-head K and V instead: there both recorders refuse
the model, saying why. CI runs it in ctest python_live_transformers (and _4).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_live_transformers as lt  # noqa: E402  (skips the module without transformers)
from test_live_transformers import note, torch, transformers  # noqa: E402

from kvscope_trace import hf_trace, read_trace, recording  # noqa: E402

V5 = int(transformers.__version__.split(".")[0]) >= 5


def tearDownModule():
    lt.tearDownModule()  # this module's rows of the shared table


def fixture(family: str) -> str:
    return os.path.join(lt.REPO, "tests", "fixtures", "families", "models", family)


class LatentRecording:
    """The live checks of one DeepSeek family: `family` (the fixture's name) and `attention` (the
    module and class name of its transformers attention)."""
    family = ""
    attention = ("", "")

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model_dir = fixture(cls.family)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    audit = lt.RecordingAroundGenerateTest.audit  # kvscope-cli audit --json: (exit, report)

    def generate(self, name: str) -> str:
        model = transformers.AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        ids = torch.tensor([[int(x) for x in lt.PROMPT.split(",")]])
        path = os.path.join(self.tmp.name, name + ".kvtrace")
        with recording(model, path):
            model.generate(ids, max_new_tokens=6, do_sample=False)
        return path

    def test_a_generate_records_the_latent_rows_and_audits_clean(self):
        path = self.generate("clean")
        t = read_trace(path)
        self.assertEqual((t.model["num_kv_heads"], t.model["head_dim"], t.model["value_head_dim"]), (1, 32, 8))
        self.assertEqual([k["kind"] for k in t.extra["layer_kinds"]], ["latent"] * 3)
        self.assertEqual(t.steps[0].layers[0].keys.shape[2], 32)
        self.assertEqual(t.steps[0].layers[0].values.shape[2], 8)
        rc, rep = self.audit(self.model_dir, path)
        note(self.family, "generate (latent cache)", "clean", rc, rep)
        self.assertEqual(rc, 0, json.dumps(rep["findings"], indent=1))

    def test_a_decode_that_reads_kv_b_proj_by_halves_is_mla_absorb(self):
        import importlib

        module, name = self.attention
        attention = getattr(importlib.import_module(module), name)
        layer_patched = 1
        original = attention.expand_kv

        def by_halves(self, kv_nope, k_rot):
            if self.layer_idx != layer_patched or kv_nope.shape[2] == 0 or getattr(self, "_prefill", True):
                return original(self, kv_nope, k_rot)
            b, _, t, _ = kv_nope.shape
            nh, nope, v = self.config.num_attention_heads, self.qk_nope_head_dim, self.v_head_dim
            flat = self.kv_b_proj(kv_nope).view(b, t, nh * (nope + v))
            k_nope = flat[..., : nh * nope].view(b, t, nh, nope).transpose(1, 2)
            values = flat[..., nh * nope:].view(b, t, nh, v).transpose(1, 2)
            keys = torch.cat([k_nope, k_rot.expand(-1, nh, -1, -1)], dim=-1)
            return keys, values

        original_forward = attention.forward

        def forward(self, hidden_states, *args, **kwargs):
            self._prefill = hidden_states.shape[1] > 1  # decode: one fed token
            return original_forward(self, hidden_states, *args, **kwargs)

        attention.expand_kv = by_halves
        attention.forward = forward
        try:
            path = self.generate("by-halves")
        finally:
            attention.expand_kv = original
            attention.forward = original_forward
        rc, rep = self.audit(self.model_dir, path)
        note(self.family, "decode reads kv_b_proj by halves", "mla_absorb", rc, rep)
        self.assertEqual(rc, 1)
        self.assertEqual([f["id"] for f in rep["findings"]], ["mla_absorb"], json.dumps(rep["findings"], indent=1))
        w = rep["findings"][0]["where"]
        self.assertEqual((w["request"], w["step"], w["layer"]), (0, 1, layer_patched))


SKIP_UNDER_4 = (f"transformers {transformers.__version__} caches DeepSeek's decompressed K/V (5.x caches "
                "the latent)")


@unittest.skipUnless(V5, SKIP_UNDER_4)
class DeepseekV3Test(LatentRecording, unittest.TestCase):
    family = "deepseek_v3"
    attention = ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3Attention")


@unittest.skipUnless(V5, SKIP_UNDER_4)
class DeepseekV2Test(LatentRecording, unittest.TestCase):
    family = "deepseek_v2"
    attention = ("transformers.models.deepseek_v2.modeling_deepseek_v2", "DeepseekV2Attention")


@unittest.skipIf(V5, "transformers 5 caches the latent: DeepseekV3Test and DeepseekV2Test record it")
class DeepseekUnderTransformers4Test(unittest.TestCase):
    def test_both_recorders_refuse_a_decompressed_cache_saying_why(self):
        for family in ("deepseek_v3", "deepseek_v2"):
            with self.subTest(family=family):
                self.refused(fixture(family))

    def refused(self, model_dir: str):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(SystemExit) as exit_:
                hf_trace.main(["--model", model_dir, "--prompt-ids", lt.PROMPT, "--max-new", "2",
                               "--out", os.path.join(tmp, "x.kvtrace")])
            self.assertEqual(exit_.exception.code, 2)
            model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
            with self.assertRaisesRegex(ValueError, "decompressed keys and values.*transformers 5"):
                with recording(model, os.path.join(tmp, "y.kvtrace")):
                    pass
            self.assertFalse(os.path.exists(os.path.join(tmp, "x.kvtrace")))


if __name__ == "__main__":
    unittest.main()
