"""The model block's rope_parameters (docs/trace-format.md "RoPE scaling"): written by the
writer as given, read back unchanged, and refused with the field named when it is
malformed, like the C++ reader."""

import os
import tempfile
import unittest

import numpy as np

from kvscope_trace import TraceError, TraceWriter, read_trace

LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
# What KV Scope's engine writes for a yarn checkpoint (DeepSeek V3, GPT-OSS) and a longrope one.
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.7, "truncate": True}
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 12,
            "short_factor": [1.0, 1.5], "long_factor": [2.0, 3.0]}


def write(path, rope):
    model = {"architecture": "llama", "num_layers": 1, "num_kv_heads": 1, "head_dim": 4,
             "vocab_size": 50, "max_positions": 64}
    if rope is not None:
        model["rope_parameters"] = rope
    w = TraceWriter(model=model)
    w.add_request(0, prompt_ids=[1, 2], generated=[7], max_new_tokens=1)
    rng = np.random.default_rng(0)
    w.add_step(request=0, step=0, fed_ids=[1, 2], positions=[0, 1], chosen=7,
               logits=np.zeros(50, np.float32), keys=[rng.standard_normal((1, 2, 4)).astype(np.float32)],
               values=[rng.standard_normal((1, 2, 4)).astype(np.float32)])
    w.save(path)


class RopeParameters(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvtrace-rope-")

    def test_round_trip(self):
        for rope in (LLAMA3, {"rope_type": "linear", "factor": 2.0}, YARN, LONGROPE, None):
            path = os.path.join(self.dir, f"{rope and rope['rope_type']}.kvtrace")
            write(path, rope)
            self.assertEqual(read_trace(path).model.get("rope_parameters"), rope)

    def test_info_names_the_scaling(self):
        from kvscope_trace.cli import info
        path = os.path.join(self.dir, "info.kvtrace")
        write(path, LLAMA3)
        self.assertIn("rope scaling: llama3 factor 8, original context 8192", info(read_trace(path), path))

    def test_malformed_is_refused_naming_the_field(self):
        bad = [({**LLAMA3, "rope_type": "yarn2"}, "model.rope_parameters.rope_type"),
               ({**LLAMA3, "factor": -1}, "model.rope_parameters.factor"),
               ({k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"},
                "model.rope_parameters.original_max_position_embeddings"),
               ({**LLAMA3, "high_freq_factor": 0.5}, "model.rope_parameters.high_freq_factor"),
               ({**YARN, "mscale_all_dim": "x"}, "model.rope_parameters.mscale_all_dim"),
               ({**YARN, "truncate": 1}, "model.rope_parameters.truncate"),
               ({**YARN, "beta_fast": 0}, "model.rope_parameters.beta_fast"),
               ({k: v for k, v in LONGROPE.items() if k != "long_factor"}, "model.rope_parameters.long_factor"),
               ({**LONGROPE, "short_factor": [1.0, -2.0]}, "model.rope_parameters.short_factor"),
               (8, "model.rope_parameters")]
        for i, (rope, field) in enumerate(bad):
            path = os.path.join(self.dir, f"bad{i}.kvtrace")
            write(path, rope)
            with self.assertRaises(TraceError) as e:
                read_trace(path)
            self.assertEqual(e.exception.field, field, str(e.exception))


if __name__ == "__main__":
    unittest.main()
