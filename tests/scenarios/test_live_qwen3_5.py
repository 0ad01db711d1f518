"""Qwen3.5 (text) recorded from real transformers 5 and audited against the checkpoint
transformers wrote (tests/fixtures/families/models/qwen3_5_text: Gated DeltaNet layers 0 and 2,
gated full attention on layers 1 and 3).

transformers caches a DeltaNet layer as a LinearAttentionLayer (the conv's last inputs and the
recurrent state, no K/V rows): the trace names it a recurrent layer, records its states after
every step, and stage 2 holds them against the reference's after the same tokens. A left-padded
batched generate whose padding reaches the recurrence (apply_mask_to_padding_states made a
no-op: the pads' inputs are not zeroed, the class of transformers#46190, where zero-padded chunks
updated the recurrent state) is `recurrent_state` at the padded request's prefill, layer 0.

transformers 4.57 has no qwen3_5: the module skips there. CI runs it in ctest
python_live_transformers.
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


def recurrent_check(rep: dict) -> str:
    """Stage 2's line on the recurrent layers' states ("ok: the recurrent states of ...", "FAIL: the
    recurrent state of ...", "not checked: ... (Gated DeltaNet)"), not the record-set line that
    names them ("layers 0 and 2 keep a recurrent state instead")."""
    return next(c for s in rep["stages"] for c in s.get("checks", [])
                if c.split(": ", 1)[-1].startswith("the recurrent state") or "(Gated DeltaNet)" in c)


@unittest.skipUnless(V5, f"transformers {transformers.__version__} has no qwen3_5 (5.x only)")
class Qwen3_5Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model_dir = os.path.join(lt.REPO, "tests", "fixtures", "families", "models", "qwen3_5_text")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    audit = lt.RecordingAroundGenerateTest.audit  # kvscope-cli audit --json: (exit, report)

    def padded_generate(self, name: str) -> str:
        """Two prompts, the second left-padded by 6, through generate under recording()."""
        model = transformers.AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        long = [int(x) for x in lt.PROMPT.split(",")]
        ids = torch.tensor([long, [0] * 6 + long[:4]])
        mask = (torch.arange(10)[None, :] >= torch.tensor([[0], [6]])).long()
        path = os.path.join(self.tmp.name, name + ".kvtrace")
        with recording(model, path):
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, pad_token_id=0, do_sample=False)
        return path

    def test_a_left_padded_batch_names_the_recurrent_layers_records_their_states_and_audits_clean(self):
        path = self.padded_generate("clean")
        t = read_trace(path)
        self.assertEqual([k["kind"] for k in t.extra["layer_kinds"]], ["recurrent", "full", "recurrent", "full"])
        rc, rep = self.audit(self.model_dir, path)
        note("qwen3_5_text", "left-padded batch of 2, generate", "clean", rc, rep)
        self.assertEqual(rc, 0, json.dumps(rep["findings"], indent=1))
        self.assertTrue(recurrent_check(rep).startswith("ok: the recurrent states of layers 0 and 2 equal"),
                        recurrent_check(rep))

    def test_padding_that_reaches_the_recurrence_is_found(self):
        from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

        original = mq.apply_mask_to_padding_states
        mq.apply_mask_to_padding_states = lambda hidden_states, attention_mask: hidden_states
        try:
            path = self.padded_generate("pads-in-state")
        finally:
            mq.apply_mask_to_padding_states = original
        rc, rep = self.audit(self.model_dir, path)
        note("qwen3_5_text", "pads not zeroed before the DeltaNet", "recurrent_state", rc, rep)
        self.assertEqual(rc, 1)
        self.assertEqual([f["id"] for f in rep["findings"]], ["recurrent_state"], json.dumps(rep["findings"], indent=1))
        f = rep["findings"][0]
        w = f["where"]
        self.assertEqual((w["request"], w["step"], w["layer"]), (1, 0, 0))
        self.assertEqual(f["evidence"]["left_pads"], 6)
        self.assertTrue(recurrent_check(rep).startswith("FAIL"), recurrent_check(rep))


if __name__ == "__main__":
    unittest.main()
