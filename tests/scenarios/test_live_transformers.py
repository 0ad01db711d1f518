"""kvscope-record against the real transformers library (not a stand-in): the Qwen3 fixture
written by transformers itself (tests/fixtures/families), its sliding layers kept as
transformers keeps them (`DynamicSlidingWindowLayer`: the last `window - 1` rows, while the
sequence length keeps counting). A clean greedy run must audit clean; the same run with the
q/k norm applied after RoPE patched into transformers' own Qwen3 attention must be found as
`qk_norm_order` at step 0, layer 0, position 1.

Needs transformers 5, or the last 4.x (4.57), and a torch it supports: run it with that
interpreter, e.g. `KVSCOPE_CLI=build/app/cli/kvscope-cli <venv>/bin/python -m unittest
test_live_transformers` from tests/scenarios. CI runs it under both (ctest
python_live_transformers and python_live_transformers_4). Without them the suite is skipped (and
says so).
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
from engine_table import EngineTable  # noqa: E402

try:
    import torch
    import transformers
    from kvscope_trace import hf_trace
except ImportError as e:  # the Debian interpreter has neither
    raise unittest.SkipTest(f"needs transformers >= 4.57 and torch ({e})")
if tuple(int(x) for x in transformers.__version__.split(".")[:2]) < (4, 57):
    raise unittest.SkipTest(f"needs transformers >= 4.57 (found {transformers.__version__})")

QWEN3 = os.path.join(REPO, "tests", "fixtures", "families", "models", "qwen3")
GPT2 = os.path.join(REPO, "tests", "fixtures", "hf", "models", "gpt2")
LLAMA = os.path.join(REPO, "tests", "fixtures", "hf", "models", "llama")
PROMPT = "5,17,300,41,99,7,12,250,3,64"  # 10 tokens: past the fixture's window of 6


def norm_after_rope():
    """Patches transformers' Qwen3 attention so that every layer applies q_norm/k_norm after
    RoPE (a port that rotates first). Returns the undo."""
    from transformers.models.qwen3 import modeling_qwen3 as mq

    rope, forward = mq.apply_rotary_pos_emb, mq.Qwen3Attention.forward

    def patched(self, *args, **kwargs):
        qn, kn = self.q_norm, self.k_norm
        self.q_norm = self.k_norm = torch.nn.Identity()

        def rotate_then_norm(q, k, cos, sin, *a, **kw):
            q2, k2 = rope(q, k, cos, sin, *a, **kw)
            return qn(q2), kn(k2)

        mq.apply_rotary_pos_emb = rotate_then_norm
        try:
            return forward(self, *args, **kwargs)
        finally:
            mq.apply_rotary_pos_emb = rope
            self.q_norm, self.k_norm = qn, kn

    mq.Qwen3Attention.forward = patched
    return lambda: setattr(mq.Qwen3Attention, "forward", forward)


# One table for the whole module, printed at its end: engine, family and run -> the finding
# expected and the one got, with its request, step, layer and position.
TABLE = EngineTable("kvscope-record on real transformers, audited")


def note(family: str, run: str, expected: str, rc: int, rep: dict) -> None:
    """One row of the table (expected "clean" or a finding id)."""
    findings = rep.get("findings") or []
    got = ",".join(f["id"] for f in findings) or ("clean" if rc == 0 else f"exit {rc}")
    w = findings[0]["where"] if findings else {}
    where = "" if not findings else (f"{w.get('request')}/{w.get('step')}/{w.get('layer')}/"
                                     f"{w.get('position')}")
    TABLE.add(f"transformers {transformers.__version__}", family, run, expected, got, where)


def tearDownModule():
    """Prints the rows noted since the last print (test_live_moe_routing shares the table)."""
    TABLE.print_and_clear()


def demo_checkpoint(root: str, arch: str, *extra: str, name: str = None) -> str:
    """A checkpoint written by `kvscope-cli make-demo` (which real transformers must load)."""
    out = os.path.join(root, name or arch)
    subprocess.run([fr.cli_path(), "make-demo", "--arch", arch, *extra, out], check=True,
                   capture_output=True)
    return out


# Families transformers 4.57 does not have: their live tests run under 5.x only.
# qwen3_next: 4.57 has it, but its hybrid cache (Qwen3NextDynamicCache) is not the DynamicCache
# kvscope-record hands the model there. (deepseek_v3, deepseek_v2: 4.57 caches each head's
# decompressed K and V, not the latent rows 5.x caches; the trace says so, model.latent_records.)
V5_ONLY = ("ministral3", "qwen3_5_text", "qwen3_5", "qwen3_next", "qwen3_5_moe_text")
# Families whose 4.57 code computes another model than the checkpoint's: DeepseekV2Attention
# scores without yarn's mscale^2 (test_live_deepseek records that and expects score_mscale).
V4_OTHER_MODEL = ("deepseek_v2",)
DEMO_ARCHES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "olmo2", "granite", "smollm3",
               "phi3", "gemma2", "gemma3_text", "gpt_oss", "mixtral", "olmo3", "glm4", "ministral3",
               "llama4_text", "qwen3_5_text", "qwen3_next", "qwen3_5_moe_text", "deepseek_v3", "deepseek_v2")


def v4_readable(root: str, family: str) -> str:
    """The family fixture (written by transformers 5: rope_parameters only) for the running
    transformers: under 4.x a copy that also states rope_theta, the key 4.x reads (it would
    otherwise take its own default, SmolLM3's 2e6, and compute another model), and
    partial_rotary_factor likewise."""
    src = os.path.join(REPO, "tests", "fixtures", "families", "models", family)
    if int(transformers.__version__.split(".")[0]) >= 5:
        return src
    with open(os.path.join(src, "config.json")) as f:
        if json.load(f)["model_type"] in V5_ONLY:
            return None
    return v4_copy(src, os.path.join(root, family + "-v4"))


def v4_copy(src: str, dst: str) -> str:
    """A copy of checkpoint `src` at `dst` whose config.json has 4.x's keys (v4_keys): what
    transformers 4.x and mlx-lm read."""
    import shutil
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "config.json")) as f:
        cfg = json.load(f)
    for c in (cfg, cfg.get("text_config")):  # a multimodal config: its language model's too
        if c is not None:
            v4_keys(c)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return dst


def v4_keys(cfg: dict) -> None:
    """transformers 5's keys of one config rewritten as 4.x reads them."""
    if "num_local_experts" in cfg and "num_experts" not in cfg:  # 5.x's name for it
        cfg["num_experts"] = cfg["num_local_experts"]
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params:  # keyed by layer type (Gemma 3): 4.x's three keys
        full, local = params["full_attention"], params.get("sliding_attention", {})
        cfg["rope_theta"] = full["rope_theta"]
        scaling = {k: v for k, v in full.items() if k != "rope_theta"}
        cfg["rope_scaling"] = scaling if scaling.get("rope_type", "default") != "default" else None
        if "rope_theta" in local:
            cfg["rope_local_base_freq"] = local["rope_theta"]
        params = {}
    for key in ("rope_theta", "partial_rotary_factor"):  # the keys 4.x reads at the top
        if key in params:
            cfg[key] = params[key]
    if params.get("rope_type", "default") == "longrope":  # 4.x's Phi-3 wants exactly three keys
        cfg["rope_scaling"] = {"type": "longrope", "short_factor": params["short_factor"],
                               "long_factor": params["long_factor"]}
    elif params.get("rope_type", "default") != "default":  # yarn: 4.x's rope_scaling
        cfg["rope_scaling"] = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}


class EveryFamilyTest(unittest.TestCase):
    """Every family the reference supports, recorded by real transformers greedy and sampled
    (KV Scope's generator, so the audit replays the draws), audits clean."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        hf = os.path.join(REPO, "tests", "fixtures", "hf", "models")
        cls.models = {
            "gpt2": os.path.join(hf, "gpt2"),
            "llama": os.path.join(hf, "llama"),
            "qwen3": QWEN3,
            **{f: v4_readable(cls.tmp.name, f) for f in ("qwen3_moe", "olmo2", "granite", "smollm3", "phi3", "gemma2",
                                                             "gemma3_text", "gpt_oss", "phi3_longrope", "mixtral",
                                                             "olmo3", "glm4", "ministral3", "gemma3",
                                                             "llama4_text", "llama4", "qwen3_5_text",
                                                             "qwen3_5", "qwen3_next", "qwen3_5_moe_text",
                                                             "deepseek_v3", "deepseek_v2")},
            # Sliding layers: every layer (mistral), from layer 1 on (qwen2).
            "mistral": demo_checkpoint(cls.tmp.name, "mistral", "--sliding-window", "6"),
            "qwen2": demo_checkpoint(cls.tmp.name, "qwen2", "--sliding-window", "6",
                                     "--max-window-layers", "1"),
        }

        v5 = int(transformers.__version__.split(".")[0]) >= 5
        cls.models = {f: m for f, m in cls.models.items() if m is not None and (v5 or f not in V4_OTHER_MODEL)}
        # Every architecture make-demo writes, in the config keys of the running transformers.
        style = "v5" if int(transformers.__version__.split(".")[0]) >= 5 else "v4"
        cls.demos = {"make-demo " + a: demo_checkpoint(cls.tmp.name, a, "--config-style", style,
                                                       name="demo-" + a)
                     for a in DEMO_ARCHES if style == "v5" or a not in V5_ONLY + V4_OTHER_MODEL}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def record(self, family: str, model: str, out: str, policy: list, *extra: str) -> None:
        # Gemma 2 with eager attention: transformers' sdpa path ignores its attention soft-cap
        # (test_attention_softcap_dropped_... finds that).
        attn = ["--attn-implementation", "eager"] if "gemma2" in family else []
        # LongRoPE switches factors past its original context (12 here): the prompt starts
        # beyond it (a cache that crosses it is recomputed by transformers' generate and
        # refused by KV Scope's engine).
        prompt = PROMPT + ",8,9,10,11" if family == "phi3_longrope" else PROMPT
        rc = hf_trace.main(["--model", model, "--prompt-ids", prompt, "--max-new", "8",
                            "--ignore-eos", "--no-fingerprint", "--out", out, *policy, *attn, *extra])
        self.assertEqual(rc, 0)

    def audit_clean(self, family: str, run: str, *args: str) -> dict:
        r = subprocess.run([fr.cli_path(), "audit", *args, "--json"], capture_output=True, text=True)
        rep = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
        note(family, run, "clean", r.returncode, rep)
        self.assertEqual(r.returncode, 0, r.stderr + json.dumps(rep.get("findings"), indent=1))
        return rep

    def test_greedy_and_sampled_runs_audit_clean(self):
        """Model+trace: each run against the checkpoint; trace+trace: the cached run against
        transformers' own uncached recording of the same run (the full prefix recomputed every
        step), no checkpoint read by KV Scope."""
        for family, model in self.models.items():
            for policy in ([], ["--temperature", "0.8", "--top-k", "20", "--seed", "3"]):
                run = "sampled" if policy else "greedy"
                with self.subTest(family=family, run=run):
                    out = os.path.join(self.tmp.name, f"{family}-{len(policy)}.kvtrace")
                    self.record(family, model, out, policy)
                    rep = self.audit_clean(family, run + ", model+trace", "--model", model, "--trace", out)
                    policy_stage = next(s for s in rep["stages"] if s["id"] == "policy")
                    self.assertEqual(policy_stage["status"], "pass", json.dumps(policy_stage, indent=1))
                    ref = os.path.join(self.tmp.name, f"{family}-{len(policy)}.uncached.kvtrace")
                    self.record(family, model, ref, policy, "--uncached")
                    self.audit_clean(family, run + ", trace+trace", "--reference-trace", ref, "--trace", out)

    def test_every_make_demo_architecture_loads_in_transformers_and_audits_clean(self):
        for name, model in self.demos.items():
            with self.subTest(arch=name):
                out = os.path.join(self.tmp.name, name.replace(" ", "-") + ".kvtrace")
                self.record(name, model, out, [])
                self.audit_clean(name, "greedy, model+trace", "--model", model, "--trace", out)


class RecordingAroundGenerateTest(unittest.TestCase):
    """kvscope_trace.recording around the researcher's own model.generate calls."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def audit(self, model_dir: str, path: str):
        r = subprocess.run([fr.cli_path(), "audit", "--model", model_dir, "--trace", path, "--json"],
                           capture_output=True, text=True)
        self.assertIn(r.returncode, (0, 1), r.stderr)
        return r.returncode, json.loads(r.stdout)

    def test_greedy_and_sampled_generate_calls_audit_clean(self):
        from kvscope_trace import read_trace, recording
        model = transformers.AutoModelForCausalLM.from_pretrained(QWEN3, dtype=torch.float32).eval()
        ids = torch.tensor([[int(x) for x in PROMPT.split(",")]])
        path = os.path.join(self.tmp.name, "generate.kvtrace")
        with recording(model, path):
            greedy = model.generate(ids, max_new_tokens=8, do_sample=False)
            torch.manual_seed(0)
            sampled = model.generate(ids, max_new_tokens=6, do_sample=True, temperature=0.9, top_k=40)
        self.assertNotIn("forward", model.__dict__)  # the block leaves the model as it was
        t = read_trace(path)
        self.assertEqual([r["generated"] for r in t.requests],
                         [greedy[0, 10:].tolist(), sampled[0, 10:].tolist()])
        self.assertEqual([len(s.fed_ids) for s in t.steps if s.request == 0], [10] + [1] * 7)
        self.assertEqual(t.requests[1]["policy"]["generator"], "torch")
        self.assertEqual(t.requests[1]["policy"]["top_k"], 40)
        rc, rep = self.audit(QWEN3, path)
        note("qwen3", "recording() around generate, greedy + sampled", "clean", rc, rep)
        self.assertEqual(rc, 0, json.dumps(rep["findings"], indent=1))
        policy = next(s for s in rep["stages"] if s["id"] == "policy")
        self.assertEqual(policy["status"], "pass", json.dumps(policy, indent=1))

    def left_padded_batch(self, model, path: str, **kwargs):
        """A batched generate of two prompts, the first left-padded by 3, inside recording()."""
        from kvscope_trace import recording
        long = [int(x) for x in PROMPT.split(",")]
        ids = torch.tensor([[0, 0, 0] + long[:7], long])
        mask = (torch.arange(10)[None, :] >= torch.tensor([[3], [0]])).long()
        with recording(model, path):
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6,
                                 pad_token_id=0, **kwargs)
        return out

    def test_a_left_padded_batch_audits_clean_in_every_family(self):
        from kvscope_trace import read_trace
        rows = []
        for name, ck in (("gpt2", GPT2), ("llama", LLAMA), ("qwen3", QWEN3)):
            model = transformers.AutoModelForCausalLM.from_pretrained(ck, dtype=torch.float32).eval()
            path = os.path.join(self.tmp.name, name + "-batch.kvtrace")
            out = self.left_padded_batch(model, path, do_sample=False)
            t = read_trace(path)
            self.assertEqual([r["batch_group"] for r in t.requests], [0, 0])
            self.assertEqual(t.requests[0]["prompt_ids"], out[0, 3:10].tolist())
            self.assertEqual([r["generated"] for r in t.requests], out[:, 10:].tolist())
            prefill = [s for s in t.steps if s.step == 0]
            self.assertEqual(prefill[0].tick, prefill[1].tick)  # one forward, one tick
            self.assertEqual(prefill[0].fed_mask, [0, 0, 0] + [1] * 7)
            rc, rep = self.audit(ck, path)
            note(name, "left-padded batch of 2, generate", "clean", rc, rep)
            rows.append((name, rc, [f["id"] for f in rep["findings"]]))
            self.assertEqual(rc, 0, name + ": " + json.dumps(rep["findings"], indent=1))
        print("\nleft-padded batch of 2 through generate, transformers " + transformers.__version__ +
              ":\n  " + "\n  ".join(f"{n:6} exit {rc} {ids}" for n, rc, ids in rows))

    def test_positions_hidden_from_generate_are_found(self):
        # A bug a wrapper makes: generate passes position_ids (cumsum(mask) - 1) only to a
        # forward whose signature names them; behind a bare (*args, **kwargs) wrapper it passes
        # none, and GPT-2 puts a left-padded row's tokens at the positions after its pads.
        model = transformers.AutoModelForCausalLM.from_pretrained(GPT2, dtype=torch.float32).eval()
        inner = model.forward
        model.forward = lambda *a, **kw: inner(*a, **kw)
        path = os.path.join(self.tmp.name, "hidden-positions.kvtrace")
        self.left_padded_batch(model, path, do_sample=False)
        rc, rep = self.audit(GPT2, path)
        note("gpt2", "position ids hidden from generate", "position", rc, rep)
        self.assertEqual(rc, 1)
        first = rep["findings"][0]
        w = first["where"]
        print(f"\npositions hidden from generate (gpt2, transformers {transformers.__version__}): "
              f"{first['id']} at request {w['request']} step {w['step']} layer {w['layer']}")
        self.assertEqual((first["id"], w["request"], w["step"]), ("position", 0, 0))

    def test_no_rope_layers_read_inverted_in_transformers_is_found(self):
        # SmolLM3Attention keeps use_rope = no_rope_layers[layer]; a port that reads the list
        # the other way round (huggingface/transformers#43756): flipped on the loaded model.
        smollm3 = os.path.join(REPO, "tests", "fixtures", "families", "models", "smollm3")
        if int(transformers.__version__.split(".")[0]) < 5:
            smollm3 = v4_readable(self.tmp.name, "smollm3")
        from kvscope_trace import recording
        model = transformers.AutoModelForCausalLM.from_pretrained(smollm3, dtype=torch.float32).eval()
        for layer in model.model.layers:
            layer.self_attn.use_rope = not layer.self_attn.use_rope
        path = os.path.join(self.tmp.name, "nope-inverted.kvtrace")
        with recording(model, path):
            model.generate(torch.tensor([[int(x) for x in PROMPT.split(",")]]), max_new_tokens=6,
                           do_sample=False)
        rc, rep = self.audit(smollm3, path)
        note("smollm3", "no_rope_layers read inverted", "nope_layer_rope", rc, rep)
        self.assertEqual(rc, 1)
        ids = [f["id"] for f in rep["findings"]]
        self.assertEqual(ids, ["nope_layer_rope"], json.dumps(rep["findings"], indent=1))
        w = rep["findings"][0]["where"]
        print(f"\nno_rope_layers inverted in transformers {transformers.__version__}'s SmolLM3: "
              f"nope_layer_rope at request {w['request']} step {w['step']} layer {w['layer']} "
              f"position {w['position']}")
        self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 0, 1))

    def test_attention_softcap_dropped_in_transformers_is_found(self):
        # Gemma2Attention passes softcap=self.attn_logit_softcapping to its attention kernel.
        # transformers' own sdpa path (the default) takes it and ignores it; a port whose
        # kernel has no soft-cap (vllm-project/vllm#7022) is the value gone under eager
        # attention. Both drop the cap on every layer at every step; eager with it is clean
        # (EveryFamilyTest).
        gemma2 = v4_readable(self.tmp.name, "gemma2")
        from kvscope_trace import recording
        rows = []
        for how in ("sdpa", "eager, cap removed"):
            with self.subTest(how=how):
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    gemma2, dtype=torch.float32, attn_implementation=how.split(",")[0]).eval()
                if how != "sdpa":
                    for layer in model.model.layers:
                        layer.self_attn.attn_logit_softcapping = None
                path = os.path.join(self.tmp.name, f"softcap-{how[:4]}.kvtrace")
                with recording(model, path):
                    model.generate(torch.tensor([[int(x) for x in PROMPT.split(",")]]),
                                   max_new_tokens=6, do_sample=False)
                rc, rep = self.audit(gemma2, path)
                note("gemma2", "soft-cap dropped (" + how + ")", "softcap_dropped", rc, rep)
                ids = [f["id"] for f in rep["findings"]]
                w = rep["findings"][0]["where"] if ids else {}
                rows.append(f"{how:18} exit {rc} {ids} at request {w.get('request')} step "
                            f"{w.get('step')} layer {w.get('layer')} position {w.get('position')}")
                self.assertEqual(rc, 1)
                self.assertEqual(ids, ["softcap_dropped"], json.dumps(rep["findings"], indent=1))
                self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 0, 1))
        print(f"\nGemma 2's attention soft-cap dropped, transformers {transformers.__version__}:\n  " +
              "\n  ".join(rows))

    def test_attention_sinks_dropped_in_transformers_are_found(self):
        # GPT-OSS's eager attention puts each head's learned sink logit into every softmax. An
        # attention backend without sinks (vllm-project/vllm#52156) runs a plain softmax: the
        # modeling module's eager_attention_forward replaced by one without the sink column.
        gpt_oss = v4_readable(self.tmp.name, "gpt_oss")
        from transformers.models.gpt_oss import modeling_gpt_oss as mg
        from kvscope_trace import recording

        def sinkless(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
            k = mg.repeat_kv(key, module.num_key_value_groups)
            v = mg.repeat_kv(value, module.num_key_value_groups)
            w = torch.matmul(query, k.transpose(2, 3)) * scaling
            if attention_mask is not None:
                w = w + attention_mask[:, :, :, : k.shape[-2]]
            p = torch.softmax(w, dim=-1)
            return torch.matmul(p, v).transpose(1, 2).contiguous(), p

        model = transformers.AutoModelForCausalLM.from_pretrained(
            gpt_oss, dtype=torch.float32, attn_implementation="eager").eval()
        original, mg.eager_attention_forward = mg.eager_attention_forward, sinkless
        try:
            path = os.path.join(self.tmp.name, "sinkless.kvtrace")
            with recording(model, path):
                model.generate(torch.tensor([[int(x) for x in PROMPT.split(",")]]),
                               max_new_tokens=6, do_sample=False)
        finally:
            mg.eager_attention_forward = original
        rc, rep = self.audit(gpt_oss, path)
        note("gpt_oss", "attention sinks dropped", "sink_dropped", rc, rep)
        ids = [f["id"] for f in rep["findings"]]
        w = rep["findings"][0]["where"] if ids else {}
        print(f"\nGPT-OSS's attention sinks dropped, transformers {transformers.__version__}: exit {rc} "
              f"{ids} at request {w.get('request')} step {w.get('step')} layer {w.get('layer')} "
              f"position {w.get('position')}")
        self.assertEqual(rc, 1)
        self.assertEqual(ids, ["sink_dropped"], json.dumps(rep["findings"], indent=1))
        self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 0, 0))

    def test_yarn_attention_factor_dropped_in_transformers_is_found(self):
        # transformers multiplies cos and sin by YaRN's attention factor (attention_scaling);
        # an engine that computes 1.0 instead (turboderp-org/exllamav3#259) is the rotary
        # module's attention_scaling set to 1.
        gpt_oss = v4_readable(self.tmp.name, "gpt_oss")
        from kvscope_trace import recording
        model = transformers.AutoModelForCausalLM.from_pretrained(
            gpt_oss, dtype=torch.float32, attn_implementation="eager").eval()
        self.assertGreater(model.model.rotary_emb.attention_scaling, 1.3)
        model.model.rotary_emb.attention_scaling = 1.0
        path = os.path.join(self.tmp.name, "yarn-factor.kvtrace")
        with recording(model, path):
            model.generate(torch.tensor([[int(x) for x in PROMPT.split(",")]]),
                           max_new_tokens=6, do_sample=False)
        rc, rep = self.audit(gpt_oss, path)
        note("gpt_oss", "YaRN attention factor dropped", "yarn_attention_factor", rc, rep)
        ids = [f["id"] for f in rep["findings"]]
        w = rep["findings"][0]["where"] if ids else {}
        print(f"\nGPT-OSS's YaRN attention factor dropped, transformers {transformers.__version__}: exit {rc} "
              f"{ids} at request {w.get('request')} step {w.get('step')} layer {w.get('layer')} "
              f"position {w.get('position')}")
        self.assertEqual(rc, 1)
        self.assertEqual(ids, ["yarn_attention_factor"], json.dumps(rep["findings"], indent=1))
        self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 0, 0))
        self.assertEqual(rep["findings"][0]["evidence"]["path_attention_factor"], 1.0)

    def test_sliding_layers_rotated_with_the_global_rope_in_transformers_are_found(self):
        # Gemma 3 rotates its sliding layers with rope_local_base_freq, unscaled; one RoPE for
        # both layer types puts the global theta and linear scaling on them (the regression of
        # vllm-project/vllm#28542, fixed by #29111). Patched on the loaded model: under 5.x the
        # rotary module answers every layer type with the full-attention table, under 4.x the
        # local rotary module is the global one.
        gemma3 = v4_readable(self.tmp.name, "gemma3_text")
        from kvscope_trace import recording
        model = transformers.AutoModelForCausalLM.from_pretrained(
            gemma3, dtype=torch.float32, attn_implementation="eager").eval()
        if hasattr(model.model, "rotary_emb_local"):
            model.model.rotary_emb_local = model.model.rotary_emb
        else:
            rotary = model.model.rotary_emb
            forward = rotary.forward
            rotary.forward = lambda x, position_ids, layer_type=None: forward(
                x, position_ids, "full_attention")
        path = os.path.join(self.tmp.name, "gemma3-one-rope.kvtrace")
        with recording(model, path):
            model.generate(torch.tensor([[int(x) for x in PROMPT.split(",")]]), max_new_tokens=6,
                           do_sample=False)
        rc, rep = self.audit(gemma3, path)
        note("gemma3_text", "sliding layers with the global RoPE", "layer_rope_theta", rc, rep)
        self.assertEqual(rc, 1)
        ids = [f["id"] for f in rep["findings"]]
        self.assertEqual(ids, ["layer_rope_theta"], json.dumps(rep["findings"], indent=1))
        f = rep["findings"][0]
        w = f["where"]
        print(f"\nGemma 3's sliding layers with the global RoPE, transformers "
              f"{transformers.__version__}: layer_rope_theta at request {w['request']} step "
              f"{w['step']} layer {w['layer']} position {w['position']}")
        self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 0, 1))
        self.assertEqual(f["evidence"]["used_rope_theta"], 1e6)

    def test_partial_rotary_turned_over_the_whole_head_in_transformers_is_found(self):
        # Phi-3 turns 6 of each head's 12 features (pairs (i, i + 3), theta^(-2i/6)). Three
        # ways ports turned the whole head instead, patched into the loaded model by giving its
        # rotary module d/2 frequencies (apply_rotary_pos_emb then turns cos.shape[-1] = 12
        # features, pairs (i, i + 6)): 1. the factor ignored; 2. the head width's frequencies
        # on the first 3 pairs only (pie-project/pie#603); 3. the rotary frequencies
        # zero-padded (labscommunity/cascadia#69).
        phi3 = v4_readable(self.tmp.name, "phi3")
        from kvscope_trace import recording
        rows = []
        for hypothesis in (1, 2, 3):
            with self.subTest(hypothesis=hypothesis):
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    phi3, dtype=torch.float32).eval()
                rotary = model.model.rotary_emb
                d = model.config.hidden_size // model.config.num_attention_heads
                right = rotary.inv_freq.clone()  # [r/2]
                head = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float) / d))
                pad = torch.zeros(d // 2 - right.numel())
                rotary.inv_freq = {1: head,
                                   2: torch.cat([head[:right.numel()], pad]),
                                   3: torch.cat([right, pad])}[hypothesis]
                path = os.path.join(self.tmp.name, f"partial-{hypothesis}.kvtrace")
                with recording(model, path):
                    model.generate(torch.tensor([[int(x) for x in PROMPT.split(",")]]),
                                   max_new_tokens=6, do_sample=False)
                rc, rep = self.audit(phi3, path)
                note("phi3", f"partial rotary over the whole head ({hypothesis})", "partial_rotary", rc, rep)
                ids = [f["id"] for f in rep["findings"]]
                f = rep["findings"][0] if ids else {"where": {}, "evidence": {}}
                w = f["where"]
                rows.append(f"hypothesis {hypothesis}: exit {rc} {ids} at request {w.get('request')} "
                            f"step {w.get('step')} layer {w.get('layer')} position {w.get('position')}"
                            f", named hypothesis {f['evidence'].get('hypothesis')}")
                self.assertEqual(rc, 1)
                self.assertEqual(ids, ["partial_rotary"], json.dumps(rep["findings"], indent=1))
                self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 0, 1))
                self.assertEqual(f["evidence"]["hypothesis"], hypothesis)
        print(f"\nPhi-3's partial rotary turned over the whole head, transformers "
              f"{transformers.__version__}:\n  " + "\n  ".join(rows))

    def test_a_mask_that_is_not_left_padding_is_refused_with_the_reason(self):
        from kvscope_trace import recording
        model = transformers.AutoModelForCausalLM.from_pretrained(QWEN3, dtype=torch.float32).eval()
        ids = torch.tensor([[int(x) for x in PROMPT.split(",")]] * 2)
        mask = torch.ones_like(ids)
        mask[1, -2:] = 0  # right padding
        path = os.path.join(self.tmp.name, "right-padded.kvtrace")
        with self.assertRaisesRegex(NotImplementedError, "only left padding"):
            with recording(model, path):
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
        self.assertFalse(os.path.exists(path))


class LiveTransformersTest(unittest.TestCase):
    def record_and_audit(self, name: str):
        out = os.path.join(self.tmp.name, name + ".kvtrace")
        rc = hf_trace.main(["--model", QWEN3, "--prompt-ids", PROMPT, "--max-new", "8",
                            "--ignore-eos", "--no-fingerprint", "--out", out])
        self.assertEqual(rc, 0)
        r = subprocess.run([fr.cli_path(), "audit", "--model", QWEN3, "--trace", out, "--json"],
                           capture_output=True, text=True)
        self.assertIn(r.returncode, (0, 1), r.stderr)
        return r.returncode, json.loads(r.stdout), out

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_clean_qwen3_run_with_sliding_layers_audits_clean(self):
        rc, rep, out = self.record_and_audit("clean")
        note("qwen3", "sliding layers kept as transformers keeps them", "clean", rc, rep)
        self.assertEqual(rc, 0, json.dumps(rep.get("findings"), indent=1))
        self.assertEqual(rep["findings"], [])
        # The trace says what transformers' sliding layers hold: window 6, 5 slots.
        from kvscope_trace import trace as kvtrace
        t = kvtrace.read_trace(out)
        kinds = t.extra["layer_kinds"]
        self.assertEqual([k["kind"] for k in kinds], ["full", "sliding", "sliding"])
        self.assertEqual(kinds[1], {"kind": "sliding", "window": 6, "ring_slots": 5})
        # Every step's records are its own: 10 for the prefill, then 1 per step; 5 rows kept.
        self.assertEqual([s.layers[1].cache_length for s in t.steps], [5] * 8)
        self.assertEqual([s.layers[1].keys.shape[1] for s in t.steps], [10] + [1] * 7)

    def test_q_k_norm_after_rope_patched_into_transformers_is_found(self):
        undo = norm_after_rope()
        try:
            rc, rep, _ = self.record_and_audit("norm-after-rope")
        finally:
            undo()
        note("qwen3", "q/k norm after RoPE", "qk_norm_order", rc, rep)
        self.assertEqual(rc, 1)
        ids = [f["id"] for f in rep["findings"]]
        self.assertEqual(ids, ["qk_norm_order"], json.dumps(rep["findings"], indent=1))
        f = rep["findings"][0]
        w = f["where"]
        self.assertEqual((w["request"], w["step"], w["layer"], w["position"]), (0, 0, 0, 1))
        ev = f["evidence"]
        self.assertLessEqual(ev["swapped_order_key_error"], ev["tolerance"])


if __name__ == "__main__":
    unittest.main()
