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

transformers 4.57 caches each head's decompressed K (nope part, then the roped part) and V instead:
the trace says so (model.latent_records "heads": num_kv_heads = heads, head_dim = qk_nope + qk_rope,
value_head_dim = v_head_dim), and the audit compares those records with the reference's latent
rows decompressed the same way: V3's generate wrapped in recording() audits clean there too; V2's
is `score_mscale` at the prefill on every layer, as 4.57's DeepseekV2Attention scores with
qk_head_dim^-0.5 alone, without yarn's mscale^2 (4.57 has no expand_kv to patch: the by-halves
decode is 5.x only). CI runs it in ctest
python_live_transformers (and _4).
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

from kvscope_trace import read_trace, recording  # noqa: E402

V5 = int(transformers.__version__.split(".")[0]) >= 5


def tearDownModule():
    lt.tearDownModule()  # this module's rows of the shared table


class LatentRecording:
    """The live checks of one DeepSeek family: `family` (the fixture's name) and `attention` (the
    module and class name of its transformers attention)."""
    family = ""
    attention = ("", "")

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model_dir = lt.v4_readable(cls.tmp.name, cls.family)  # 4.x: rope_scaling, rope_theta

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

    def test_a_generate_records_the_cache_and_audits_clean(self):
        path = self.generate("clean")
        t = read_trace(path)
        with open(os.path.join(self.model_dir, "config.json")) as f:
            c = json.load(f)
        if V5:  # the latent rows and roped key parts
            shape = (1, c["kv_lora_rank"], c["qk_rope_head_dim"])
            self.assertNotIn("latent_records", t.model)
        else:  # each head's decompressed key and value
            shape = (c["num_attention_heads"], c["qk_nope_head_dim"] + c["qk_rope_head_dim"], c["v_head_dim"])
            self.assertEqual(t.model["latent_records"], "heads")
        self.assertEqual((t.model["num_kv_heads"], t.model["head_dim"], t.model["value_head_dim"]), shape)
        self.assertEqual([k["kind"] for k in t.extra["layer_kinds"]], ["latent"] * 3)
        self.assertEqual(t.steps[0].layers[0].keys.shape[0], shape[0])
        self.assertEqual(t.steps[0].layers[0].keys.shape[2], shape[1])
        self.assertEqual(t.steps[0].layers[0].values.shape[2], shape[2])
        rc, rep = self.audit(self.model_dir, path)
        if not V5 and self.family == "deepseek_v2":
            # transformers 4.57's DeepseekV2Attention scales its scores by qk_head_dim^-0.5 alone:
            # yarn's mscale^2 (DeepSeek's own code, 4.57's V3 and 5.x's V2 apply it) is missing.
            note(self.family, "generate (decompressed heads)", "score_mscale", rc, rep)
            self.assertEqual(rc, 1)
            self.assertEqual([f["id"] for f in rep["findings"]], ["score_mscale"], json.dumps(rep["findings"], indent=1))
            w = rep["findings"][0]["where"]
            self.assertEqual((w["request"], w["step"], w["layer"]), (0, 0, 0))
            self.assertEqual(rep["findings"][0]["evidence"]["unscaled_softmax_layers_above"], 1)
            return
        note(self.family, "generate (latent cache)" if V5 else "generate (decompressed heads)", "clean", rc, rep)
        self.assertEqual(rc, 0, json.dumps(rep["findings"], indent=1))

    @unittest.skipUnless(V5, "transformers 4.x decompresses in its attention forward: no expand_kv to patch")
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


class DeepseekV3Test(LatentRecording, unittest.TestCase):
    family = "deepseek_v3"
    attention = ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3Attention")


class DeepseekV2Test(LatentRecording, unittest.TestCase):
    family = "deepseek_v2"
    attention = ("transformers.models.deepseek_v2.modeling_deepseek_v2", "DeepseekV2Attention")


if __name__ == "__main__":
    unittest.main()
