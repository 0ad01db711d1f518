"""A mixture of experts' routing recorded from real transformers (Qwen3-MoE, Mixtral, GPT-OSS:
the family fixtures written by transformers itself) and audited against the float32
checkpoint.

A bf16 run of transformers takes another expert than float32 where two experts' router logits
lie within bf16's rounding (tests/fixtures/families/golden/*.routing.safetensors: Mixtral and
GPT-OSS at 5 (position, layer) pairs of their two prompts), and from that token on its K/V
leave any tolerance without a bug. kvscope-record records the experts (a hook on each MoE
block's router), and the audit's reference takes them on those near ties: the runs audit
clean, and the same traces without their experts do not. An expert count misread, patched
into transformers (a router's top_k of 3 where the config says 2), is `expert_routing` at the
step, layer and token it fires.

Run like test_live_transformers (transformers 5, or 4.57 with the -v4 copies); CI runs both
modules in ctest python_live_transformers(_4).
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
import foreign_runs as fr  # noqa: E402
from test_live_transformers import note, torch, transformers  # noqa: E402

from kvscope_trace import hf_trace, read_trace, recording, write_trace  # noqa: E402

MOE = ("mixtral", "gpt_oss", "qwen3_moe")
GOLDEN = os.path.join(lt.REPO, "tests", "fixtures", "families", "golden")


def tearDownModule():
    lt.tearDownModule()  # this module's rows of the shared table


class MoeRoutingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.models = {f: lt.v4_readable(cls.tmp.name, f) for f in MOE}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    audit = lt.RecordingAroundGenerateTest.audit  # kvscope-cli audit --json: (exit, report)

    @staticmethod
    def routing_line(rep: dict) -> str:
        for st in rep["stages"]:
            for c in st["checks"]:
                if "expert routing" in c:
                    return c
        return ""

    def test_bf16_runs_audit_clean_with_their_near_ties_followed(self):
        """Each family's golden prompts run by transformers in bfloat16 (greedy, 8 tokens):
        clean against the float32 checkpoint with the experts, and the near ties followed where
        bf16 flipped one; the same trace without its experts diverges where it flipped."""
        followed_any = {}
        for family, model in self.models.items():
            with open(os.path.join(GOLDEN, family + ".json")) as f:
                prompts = [",".join(map(str, p["ids"])) for p in json.load(f)["prompts"]]
            for i, ids in enumerate(prompts):
                with self.subTest(family=family, prompt=i):
                    out = os.path.join(self.tmp.name, f"{family}-{i}-bf16.kvtrace")
                    rc = hf_trace.main(["--model", model, "--prompt-ids", ids, "--max-new", "8",
                                        "--ignore-eos", "--no-fingerprint", "--dtype", "bfloat16",
                                        "--store", "BF16", "--attn-implementation", "eager", "--out", out])
                    self.assertEqual(rc, 0)
                    t = read_trace(out)
                    self.assertTrue(all(s.experts is not None for s in t.steps))
                    rc, rep = self.audit(model, out)
                    line = self.routing_line(rep)
                    followed = "took the engine's experts" in line
                    note(family, f"bf16 prompt {i}" + (", near ties followed" if followed else ""), "clean", rc, rep)
                    self.assertEqual(rc, 0, line + "\n" + json.dumps(rep["findings"], indent=1))
                    self.assertTrue(line.startswith("ok: expert routing of"), line)
                    followed_any[family] = followed_any.get(family, False) or followed
                    if not followed:
                        continue
                    # Without the experts the flip is a divergence no row can name as noise.
                    for s in t.steps:
                        s.experts = None
                    bare = os.path.join(self.tmp.name, f"{family}-{i}-bf16-bare.kvtrace")
                    write_trace(t, bare)
                    rc2, rep2 = self.audit(model, bare)
                    note(family, f"bf16 prompt {i}, experts left out", "a divergence", rc2, rep2)
                    self.assertEqual(rc2, 1, json.dumps(rep2["findings"], indent=1))
                    self.assertTrue(self.routing_line(rep2).startswith("not checked: expert routing"))
        # transformers' bf16 flips on these prompts (the routing goldens) happen in the
        # recorded runs too.
        self.assertTrue(followed_any.get("mixtral") and followed_any.get("gpt_oss"), followed_any)

    def test_an_expert_count_misread_in_transformers_is_found(self):
        """Mixtral's layer-1 router taking 3 experts where num_experts_per_tok is 2 (a config
        key misread, JieShibo/MoLE#7), inside recording() around generate."""
        model_dir = self.models["mixtral"]
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        layer = model.model.layers[1]
        block = getattr(layer, "mlp", None) or layer.block_sparse_moe  # 5.x / 4.x's name
        block.top_k = 3  # transformers 4: the block's top-k; 5: its router's
        if hasattr(block.gate, "top_k"):
            block.gate.top_k = 3
        path = os.path.join(self.tmp.name, "mixtral-topk3.kvtrace")
        with recording(model, path):
            model.generate(torch.tensor([[int(x) for x in lt.PROMPT.split(",")]]), max_new_tokens=6,
                           do_sample=False)
        rc, rep = self.audit(model_dir, path)
        note("mixtral", "layer 1 routed to 3 experts (num_experts_per_tok 2)", "expert_routing", rc, rep)
        ids = [f["id"] for f in rep["findings"]]
        self.assertEqual(rc, 1)
        self.assertEqual(ids, ["expert_routing"], json.dumps(rep["findings"], indent=1))
        f = rep["findings"][0]
        w = f["where"]
        self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 1, 0))
        self.assertEqual(f["evidence"]["engine_experts_per_token"], 3)
        self.assertEqual(f["evidence"]["checkpoint_experts_per_token"], 2)


if __name__ == "__main__":
    unittest.main()
