"""Llama 4 (text) recorded from real transformers and audited against the checkpoint
transformers wrote (tests/fixtures/families/models/llama4_text: chunks of 8 positions on layers
0 and 2, a NoPE layer with query temperature, a mixture of experts beside a shared expert).

transformers caches a chunked layer like a sliding one (DynamicSlidingWindowLayer of
attention_chunk_size, keeping chunk - 1 rows); the trace names it a chunked layer and the run
audits clean. A chunked layer masked as a sliding window of its chunk (the chunk mask replaced
by the sliding-window mask, as huggingface/transformers#37351 and PaddleFormers#4536 got it
wrong) is `chunk_mask` at the first position past the first chunk. A left-padded batched
generate takes the NoPE layer's query temperature at the cache index, its pads counted: the
padded request is `temperature_position` (transformers' own behaviour, 5.x and 4.57).

Run like test_live_transformers (transformers 5, or 4.57 with the -v4 copy); CI runs this
module in ctest python_live_transformers(_4).
"""

from __future__ import annotations

import copy
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


def tearDownModule():
    lt.tearDownModule()  # this module's rows of the shared table


class Llama4Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model_dir = lt.v4_readable(cls.tmp.name, "llama4_text")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    audit = lt.RecordingAroundGenerateTest.audit  # kvscope-cli audit --json: (exit, report)

    def generate(self, name: str) -> str:
        model = transformers.AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        path = os.path.join(self.tmp.name, name + ".kvtrace")
        with recording(model, path):
            model.generate(torch.tensor([[int(x) for x in lt.PROMPT.split(",")]]), max_new_tokens=8,
                           do_sample=False)
        return path

    def test_a_generate_call_names_the_chunked_layers_and_audits_clean(self):
        path = self.generate("clean")
        kinds = read_trace(path).extra["layer_kinds"]
        self.assertEqual(kinds, [{"kind": "chunked", "chunk": 8, "ring_slots": 7}, {"kind": "full"},
                                 {"kind": "chunked", "chunk": 8, "ring_slots": 7}])
        rc, rep = self.audit(self.model_dir, path)
        note("llama4_text", "recording() around generate, greedy", "clean", rc, rep)
        self.assertEqual(rc, 0, json.dumps(rep["findings"], indent=1))

    def test_a_left_padded_batch_is_found_taking_the_temperature_at_the_cache_index(self):
        """transformers' Llama 4 scales the NoPE layer's queries at arange(seq) + the cache's
        length (4.x: cache_position), so request 0, padded by 3, takes its temperature 3
        positions late: temperature_position where that crosses a floor_scale step."""
        model = transformers.AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        long = [int(x) for x in lt.PROMPT.split(",")]
        ids = torch.tensor([[0, 0, 0] + long[:7], long])
        mask = (torch.arange(10)[None, :] >= torch.tensor([[3], [0]])).long()
        path = os.path.join(self.tmp.name, "padded.kvtrace")
        with recording(model, path):
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, pad_token_id=0, do_sample=False)
        rc, rep = self.audit(self.model_dir, path)
        note("llama4_text", "left-padded batch of 2, generate", "temperature_position", rc, rep)
        self.assertEqual(rc, 1)
        self.assertEqual([f["id"] for f in rep["findings"]], ["temperature_position"],
                         json.dumps(rep["findings"], indent=1))
        w = rep["findings"][0]["where"]
        self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 1, 1))
        self.assertEqual(rep["findings"][0]["evidence"]["left_pads"], 3)

    def test_a_chunk_masked_as_a_sliding_window_in_transformers_is_found(self):
        from transformers import masking_utils as mu
        from transformers.models.llama4 import modeling_llama4 as ml

        def as_window(config, **kwargs):  # the chunk taken for a sliding window of its size
            c = copy.copy(config)
            c.sliding_window = config.attention_chunk_size
            return mu.create_sliding_window_causal_mask(config=c, **kwargs)

        original, ml.create_chunked_causal_mask = ml.create_chunked_causal_mask, as_window
        try:
            path = self.generate("chunk-as-window")
        finally:
            ml.create_chunked_causal_mask = original
        rc, rep = self.audit(self.model_dir, path)
        note("llama4_text", "chunked layers masked as a sliding window", "chunk_mask", rc, rep)
        ids = [f["id"] for f in rep["findings"]]
        self.assertEqual(rc, 1)
        self.assertEqual(ids, ["chunk_mask"], json.dumps(rep["findings"], indent=1))
        f = rep["findings"][0]
        w = f["where"]
        # The 10-token prompt passes the first chunk of 8: layer 0's attention at position 8
        # sees position 1..7 too, so layer 1's records differ from there.
        self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 0, 8))
        self.assertEqual(f["evidence"]["windowed_layers"], 2)


if __name__ == "__main__":
    unittest.main()
