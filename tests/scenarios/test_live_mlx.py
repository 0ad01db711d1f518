"""MLX (Apple's array framework; mlx[cpu] on Linux) and mlx-lm as the engine under audit,
pinned in tests/live/requirements-mlx.txt (scripts/live-python.sh --mlx):

- Clean runs of the Llama and Qwen3 fixtures, greedy and sampled, recorded by
  `kvscope-record --engine mlx` (mlx-lm loads the HF checkpoint and runs its own KVCache),
  audit clean against the checkpoint (Qwen3 without its sliding window).
- mlx-lm's Qwen3 ignores `use_sliding_window` / `layer_types` (it attends over every row on
  every layer; transformers' Qwen3 windows the sliding layers): on the Qwen3 fixture, whose
  layers 1 and 2 slide over 6 positions, the audit says `sliding_window` from the 7th token on,
  at the first sliding layer whose keys depend on attention (layer 2).
- The cache mlx-lm saves (save_prompt_cache) audits clean by itself: with the token list the
  recorder puts in its metadata, and without it (a cache mlx_lm.cache_prompt made) with the
  tokens given by --ids.
- Llama 4 as released (Llama4ForConditionalGeneration; 4 layers, layers 0-2 chunked over 8
  positions, layer 3 NoPE and full): mlx-lm runs its ChunkedKVCache on the chunked layers (it
  drops the rows before the current chunk); recorded as chunked layers, the run audits clean.
  mlx-lm's Llama 4 takes every fourth layer as NoPE whatever `no_rope_layers` says (and chunks
  the others): with no_rope_layers [1, 0, 1, 1] the audit says `nope_layer_rope` at layer 1,
  position 0, the layers where the list and the interval rule disagree (1 and 3) run as the
  other kind, their chunking with them.
- DeepSeek V3 and V2 (the family fixtures, given mlx-lm the 4.x keys it reads: rope_scaling
  and rope_theta): mlx-lm's V3 caches the latent rows and roped key parts as transformers 5 does
  and decodes in the absorbed form; it turns the roped pairs in place, which for V3
  (rope_interleave) the recorder and the prompt-cache reader put back in V3's order. Its V2
  caches each head's decompressed key and value (model.latent_records "heads"). Greedy runs and
  their saved prompt caches audit clean.
- Qwen3-Next and Qwen3.5 (the family fixtures; mlx-lm builds their layers from
  full_attention_interval): each Gated DeltaNet layer's ArraysCache (the conv's last K-1
  inputs, the recurrent state) recorded as a recurrent layer's states; greedy runs and their
  saved prompt caches audit clean. A prefix hit that trims the attention rows to the 6 shared
  tokens and keeps request 0's DeltaNet state (modular issue 6681) is `prefix_state` at
  request 1's hit, layer 0; with the state of those 6 tokens restored it is clean.
- A prompt-cache reuse off by one token through mlx-lm's own API: request 1 shares 6 prompt
  tokens with request 0, whose cache is trimmed (trim_prompt_cache) to 7 entries instead of 6
  and reused; request 1 feeds its tokens from position 7. Recorded as the prefix hit the
  engine believed it made, it is `prefix_reuse` at request 1's first step, layer 0, position 6;
  trimmed to 6 it is clean.

One table: engine x family x run -> expected, got, where. CI runs it as ctest python_live_mlx.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
import foreign_runs as fr  # noqa: E402
from engine_table import EngineTable, where  # noqa: E402

try:
    import mlx.core  # noqa: F401
    import mlx_lm
    import transformers  # noqa: F401  (mlx-lm reads the checkpoint's config through it)
    from kvscope_trace import hf_trace
    from kvscope_trace import trace as kvtrace
    from kvscope_trace.mlx_trace import MlxSession
except ImportError as e:
    raise unittest.SkipTest(f"needs mlx, mlx_lm and transformers ({e})")

PROMPT = [5, 17, 300, 41, 99, 7, 12, 250, 3, 64]
OTHER = PROMPT[:6] + [88, 91, 33, 47]
MODELS = {"llama": os.path.join(REPO, "tests", "fixtures", "hf", "models", "llama"),
          "qwen3": os.path.join(REPO, "tests", "fixtures", "families", "models", "qwen3")}
ENGINE = f"mlx-lm {mlx_lm.__version__}"
TABLE = EngineTable(ENGINE + " under audit")


def tearDownModule():
    TABLE.print_and_clear()


def llama4_checkpoint(out: str) -> str:
    """A tiny random Llama 4 as released (the family fixture's text model, 4 layers so that
    mlx-lm's fixed pattern, every fourth layer NoPE and full, is the config's), written by
    transformers with the 4.x keys mlx-lm's TextArgs requires (rope_theta, rope_scaling)."""
    import torch
    sys.path.insert(0, os.path.join(REPO, "tests", "fixtures", "families"))
    from family_specs import FAMILIES, LLAMA4_TEXT
    text = {k: v for k, v in LLAMA4_TEXT.items() if k != "no_rope_layers"}
    text["num_hidden_layers"] = 4
    config = transformers.AutoConfig.for_model(**dict(FAMILIES["llama4"]["config"], text_config=text))
    torch.manual_seed(4)
    model = transformers.Llama4ForConditionalGeneration._from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(MODELS["llama"], f), os.path.join(out, f))
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    rope = cfg["text_config"]["rope_parameters"]
    cfg["text_config"].update(rope_theta=rope["rope_theta"],
                              rope_scaling={k: v for k, v in rope.items() if k != "rope_theta"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return out


def deltanet_copy(family: str, out: str) -> str:
    """A Gated DeltaNet family fixture (qwen3_next, qwen3_5) as mlx-lm builds it: mlx-lm takes
    its layers from `full_attention_interval` (released Qwen3-Next and Qwen3.5 configs carry
    it; default 4), not from the `layer_types` transformers writes, and reads Qwen3-Next's 4.x
    rope keys. The fixture's layer_types (every second layer full) as that interval."""
    sys.path.insert(0, HERE)
    from test_live_transformers import v4_copy
    model = v4_copy(os.path.join(REPO, "tests", "fixtures", "families", "models", family), out)
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    text = cfg.get("text_config", cfg)
    types = text["layer_types"]
    interval = types.index("full_attention") + 1
    assert types == ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                     for i in range(len(types))], types
    text["full_attention_interval"] = interval
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return model


class MlxUnderAuditTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # The Qwen3 fixture as released Qwen3 checkpoints are: no sliding window.
        full = os.path.join(cls.tmp.name, "qwen3-full")
        shutil.copytree(MODELS["qwen3"], full)
        with open(os.path.join(full, "config.json")) as f:
            cfg = json.load(f)
        cfg.update(use_sliding_window=False, sliding_window=None,
                   layer_types=["full_attention"] * cfg["num_hidden_layers"])
        with open(os.path.join(full, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        MODELS["qwen3 (no window)"] = full

        MODELS["llama4"] = llama4_checkpoint(os.path.join(cls.tmp.name, "llama4"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, family: str, run: str, trace: str, expect: fr.Expectation, extra=(), position=None):
        got = fr.audit(trace, model=MODELS[family], extra=list(extra))
        TABLE.add(ENGINE, family, run, ", ".join(expect.findings) or "clean",
                  ", ".join(got.roots) or got.verdict or got.error,
                  where(got.first))
        problems = got.problems(expect)
        if position is not None and (got.first or {}).get("position") != position:
            problems.append(f"first position {(got.first or {}).get('position')} != {position}")
        self.assertEqual(problems, [], got.report.get("findings", got.error))

    def record(self, family: str, model: str, name: str, extra=()):
        """kvscope-record --engine mlx of PROMPT and 8 tokens (greedy, or `extra`'s policy), the
        last cache saved: the trace's and the cache's paths."""
        MODELS[family] = model
        out = os.path.join(self.tmp.name, f"{name}.kvtrace")
        cache = out.replace(".kvtrace", ".safetensors")
        self.assertEqual(hf_trace.main(["--engine", "mlx", "--model", model, "--prompt-ids",
                                        ",".join(map(str, PROMPT)), "--max-new", "8", "--ignore-eos",
                                        "--save-state", cache, "--out", out, *extra]), 0)
        return out, cache

    def test_clean_runs_and_saved_caches_audit_clean(self):
        sampled = ["--temperature", "0.8", "--top-k", "40", "--seed", "5"]
        for family in ("llama", "qwen3 (no window)"):
            for run, extra in (("greedy", []), ("sampled", sampled)):
                with self.subTest(family=family, run=run):
                    out, cache = self.record(family, MODELS[family], f"{family}-{run}", extra)
                    self.check(family, run, out, fr.Expectation())
                    self.check(family, f"{run}: saved prompt cache", cache, fr.Expectation())
        # Llama 4: mlx-lm's ChunkedKVCache on layers 0-2 (chunks of 8; the 10-token prompt and 8
        # decode steps cross two chunk edges).
        out = os.path.join(self.tmp.name, "llama4.kvtrace")
        self.assertEqual(hf_trace.main(["--engine", "mlx", "--model", MODELS["llama4"], "--prompt-ids",
                                        ",".join(map(str, PROMPT)), "--max-new", "8", "--ignore-eos",
                                        "--out", out]), 0)
        self.assertEqual([k["kind"] for k in kvtrace.read_trace(out).extra["layer_kinds"]],
                         ["chunked", "chunked", "chunked", "full"])
        self.check("llama4", "greedy, ChunkedKVCache", out, fr.Expectation())
        listed = os.path.join(self.tmp.name, "llama4-listed")
        shutil.copytree(MODELS["llama4"], listed)
        with open(os.path.join(listed, "config.json")) as f:
            cfg = json.load(f)
        cfg["text_config"].update(no_rope_layers=[1, 0, 1, 1], layer_types=[
            "chunked_attention", "full_attention", "chunked_attention", "chunked_attention"])
        with open(os.path.join(listed, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        MODELS["llama4, no_rope_layers [1, 0, 1, 1]"] = listed
        out = os.path.join(self.tmp.name, "llama4-listed.kvtrace")
        self.assertEqual(hf_trace.main(["--engine", "mlx", "--model", listed, "--prompt-ids",
                                        ",".join(map(str, PROMPT)), "--max-new", "4", "--ignore-eos",
                                        "--out", out]), 0)
        self.check("llama4, no_rope_layers [1, 0, 1, 1]", "greedy: mlx-lm's fixed NoPE pattern", out,
                   fr.Expectation(["nope_layer_rope"], first_step=0, first_layer=1), position=0)
        # The windowed fixture: mlx-lm does not window; the audit names the row.
        out = os.path.join(self.tmp.name, "qwen3-windowed.kvtrace")
        self.assertEqual(hf_trace.main(["--engine", "mlx", "--model", MODELS["qwen3"], "--prompt-ids",
                                        ",".join(map(str, PROMPT)), "--max-new", "4", "--ignore-eos",
                                        "--out", out]), 0)
        self.check("qwen3", "greedy, sliding window 6 in the config", out,
                   fr.Expectation(["sliding_window"], first_step=0, first_layer=2), position=6)
        # A cache whose metadata names no tokens (as mlx_lm.cache_prompt writes it): --ids say.
        s = MlxSession(MODELS["llama"])
        s.new_cache()
        s.logits(PROMPT)
        from mlx_lm.models.cache import save_prompt_cache
        plain = os.path.join(self.tmp.name, "plain.safetensors")
        save_prompt_cache(plain, s.cache, {"model": "llama"})
        self.check("llama", "prompt cache without tokens, --ids given", plain, fr.Expectation(),
                   extra=["--ids", ",".join(map(str, PROMPT))])
        r = subprocess.run([fr.cli_path(), "audit", "--model", MODELS["llama"], "--trace", plain],
                           capture_output=True, text=True)
        TABLE.add(ENGINE, "llama", "prompt cache without tokens, none given", "exit 2 naming 0.tokens",
                  f"exit {r.returncode}", "-")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("0.tokens", r.stderr)

    def test_deepseek_latent_caches_audit_clean(self):
        sys.path.insert(0, HERE)
        from test_live_transformers import v4_copy  # the fixture's 5.x keys as 4.x (and mlx-lm) read them
        for family in ("deepseek_v3", "deepseek_v2"):
            with self.subTest(family=family):
                model = v4_copy(os.path.join(REPO, "tests", "fixtures", "families", "models", family),
                                os.path.join(self.tmp.name, family))
                with open(os.path.join(model, "config.json")) as f:
                    cfg = json.load(f)
                out, cache = self.record(family, model, family)
                t = kvtrace.read_trace(out)
                self.assertEqual([k["kind"] for k in t.extra["layer_kinds"]], ["latent"] * cfg["num_hidden_layers"])
                if family == "deepseek_v3":  # latent rows and roped key parts
                    shape, run = (1, cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]), "greedy, latent KVCache"
                else:  # mlx-lm's V2: each head's decompressed key and value
                    shape = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"],
                             cfg["v_head_dim"])
                    run = "greedy, KVCache of decompressed heads"
                    self.assertEqual(t.model["latent_records"], "heads")
                self.assertEqual((t.model["num_kv_heads"], t.model["head_dim"], t.model["value_head_dim"]), shape)
                self.check(family, run, out, fr.Expectation())
                self.check(family, "greedy: saved prompt cache", cache, fr.Expectation())

    def prefix_hit(self, model: str, name: str, keep: int, rebuild_states: bool = True) -> str:
        """Request 0 runs PROMPT for 3 steps; request 1 (OTHER, which shares PROMPT's first 6
        tokens) reuses its cache as a prefix hit of `keep` entries: the attention layers'
        KVCaches are trimmed to `keep` rows, and request 1 feeds its tokens from position `keep`
        on. Gated DeltaNet layers (ArraysCache, which mlx-lm cannot trim) either get the state
        after those `keep` tokens (`rebuild_states`: a run of them, as engines that snapshot
        states at block edges keep one) or keep request 0's, after its 12 tokens (modular issue
        6681: a prefix hit reused the attention blocks and never rebuilt the DeltaNet state)."""
        from kvscope_trace.mlx_trace import is_state_layer, layer_state
        s = MlxSession(model)
        w = kvtrace.TraceWriter(s.model_info(), engine=s.engine_name())
        kinds = ["recurrent" if is_state_layer(c) else "full" for c in s.new_cache()]
        if "recurrent" in kinds:
            w.extra["layer_kinds"] = [{"kind": k} for k in kinds]
        policy = {"temperature": 0.0, "generator": "kvscope"}
        H, D = w.model["num_kv_heads"], w.model["head_dim"]
        for rid, prompt in ((0, PROMPT), (1, OTHER)):
            w.add_request(rid, prompt, policy=policy, max_new_tokens=3, stop_reason="running")
            start = 0
            if rid == 1:
                start = keep
                if rebuild_states:
                    fresh = MlxSession(model)
                    fresh.new_cache()
                    fresh.logits(PROMPT[:keep])
                for i, c in enumerate(s.cache):
                    if kinds[i] == "full":
                        c.trim(c.offset - keep)
                    elif rebuild_states:
                        c[0], c[1] = fresh.cache[i][0], fresh.cache[i][1]
            fed, stream, had = prompt[start:], list(prompt), 0
            for step in range(3):
                pos = list(range(len(stream) - len(fed), len(stream)))
                logits = s.logits(fed)
                keys, values, states = [], [], {}
                for i, c in enumerate(s.cache):
                    if kinds[i] == "recurrent":
                        conv, state = layer_state(c)
                        states[i] = (conv[0], state[0])
                        keys.append(np.zeros((H, 0, D), np.float32))
                        values.append(np.zeros((H, 0, D), np.float32))
                    else:
                        keys.append(np.array(c.keys[0, :, had:c.offset, :]))
                        values.append(np.array(c.values[0, :, had:c.offset, :]))
                        held = c.offset
                t = int(np.argmax(logits))
                w.add_step(rid, step, fed, pos, chosen=t, logits=logits, keys=keys, values=values, states=states or None,
                           events=["arrival"] if step == 0 else [],
                           reused_count=start if step == 0 else 0, reused_from=0 if step == 0 and start else -1)
                had = held
                fed = [t]
                stream.append(t)
            w.update_request(rid, generated=stream[len(prompt):], stop_reason="max_new_tokens")
        path = os.path.join(self.tmp.name, name + ".kvtrace")
        w.save(path)
        return path

    def test_gated_deltanet_states_audit_clean_and_a_stale_state_is_found(self):
        """Qwen3-Next and Qwen3.5: mlx-lm keeps each Gated DeltaNet layer's conv inputs and
        recurrent state in an ArraysCache (the conv's last K-1 inputs, where transformers keeps
        K; the state as [Hv, Dv, Dk]); recorded as recurrent layers with their states, greedy runs
        and their saved prompt caches audit clean. A prefix hit that keeps the attention rows
        but not the state is `prefix_state` at the hit, at the first recurrent layer."""
        for family in ("qwen3_next", "qwen3_5"):
            with self.subTest(family=family):
                model = deltanet_copy(family, os.path.join(self.tmp.name, family))
                with open(os.path.join(model, "config.json")) as f:
                    cfg = json.load(f)
                text = cfg.get("text_config", cfg)
                out, cache = self.record(family, model, family)
                t = kvtrace.read_trace(out)
                self.assertEqual([k["kind"] for k in t.extra["layer_kinds"]],
                                 ["recurrent" if x == "linear_attention" else "full" for x in text["layer_types"]])
                conv_channels = 2 * text["linear_num_key_heads"] * text["linear_key_head_dim"] + \
                    text["linear_num_value_heads"] * text["linear_value_head_dim"]
                for st in t.steps:  # every step records the states: the conv's last K-1 inputs
                    self.assertEqual(st.layers[0].conv_state.shape,
                                     (conv_channels, text["linear_conv_kernel_dim"] - 1))
                    self.assertEqual(st.layers[0].recurrent_state.shape,
                                     (text["linear_num_value_heads"], text["linear_key_head_dim"],
                                      text["linear_value_head_dim"]))
                self.check(family, "greedy, ArraysCache states", out, fr.Expectation())
                self.check(family, "greedy: saved prompt cache", cache, fr.Expectation())
        model = MODELS["qwen3_next"]
        self.check("qwen3_next", "prefix hit of 6 tokens, state rebuilt", self.prefix_hit(model, "rebuilt", 6),
                   fr.Expectation())
        self.check("qwen3_next", "prefix hit of 6 tokens, request 0's state kept",
                   self.prefix_hit(model, "stale", 6, rebuild_states=False),
                   fr.Expectation(["prefix_state"], first_step=0, first_layer=0, first_request=1))

    def test_prompt_cache_reuse_off_by_one_is_found(self):
        self.check("llama", "prompt-cache reuse of 6 shared tokens", self.prefix_hit(MODELS["llama"], "reuse-6", 6),
                   fr.Expectation())
        self.check("llama", "reuse off by one (trimmed to 7)", self.prefix_hit(MODELS["llama"], "reuse-7", 7),
                   fr.Expectation(["prefix_reuse"], first_step=0, first_layer=0, first_request=1), position=6)


if __name__ == "__main__":
    unittest.main()
