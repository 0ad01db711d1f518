"""The audit on runs KV Scope did not record: every transformers-recorded scenario and every
independent-engine run (gpt2 and llama; float32 and bfloat16 compute; greedy and
torch-sampled) must give the expected root findings, first step and first layer, nothing
else, and every clean run nothing but `drift`. One table of all rows is printed.

Run: /usr/bin/python3 -m unittest discover -s tests/scenarios -p "test_*.py"
(needs numpy, torch and a built kvscope-cli; $KVSCOPE_CLI names it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "independent"))
import foreign_runs as fr  # noqa: E402
import scenario_to_trace  # noqa: E402

try:
    import torch  # noqa: F401
    import batched_runs
    import foreign_prefix
    import record_run
    import st_numpy
    HAVE_TORCH = True
except ImportError:  # the independent engine needs torch; the scenarios do not
    if os.environ.get("CI"):  # CI installs python3-torch (scripts/setup.sh): a skip there hides a break
        raise
    HAVE_TORCH = False

# CI installs both (scripts/setup.sh): there a missing one fails instead of skipping.
needs_cli = unittest.skipUnless(os.path.exists(fr.cli_path()) or os.environ.get("CI"), "kvscope-cli is not built")
needs_torch = unittest.skipUnless(HAVE_TORCH, "python3-torch is not installed")
FIXTURES = os.path.join(REPO, "tests", "fixtures", "hf")
MODELS = os.path.join(FIXTURES, "models")
SCENARIOS = os.path.join(FIXTURES, "scenarios")
ROWS = [["source", "run", "mode", "expected", "got (root findings; consequences)", "first", "result"]]
FAILURES = []


def record_row(source, run, mode, expect, out, problems):
    got = ", ".join(out.roots) or "-"
    if out.consequences:
        got += "; " + ", ".join(f"{c} (caused)" for c in out.consequences)
    if out.error:
        got = out.error[:60]
    want = ", ".join(expect.findings) or "none"
    if expect.first_step is not None:
        want += f" @s{expect.first_step}" + (f" L{expect.first_layer}" if expect.first_layer is not None else "")
    ROWS.append([source, run, mode, want, got, out.where(), "ok" if not problems else "FAIL"])
    if problems:
        FAILURES.append(f"{source} {run} ({mode}): " + "; ".join(problems))


def tearDownModule():
    print("\nKV Scope audit on foreign runs (" + str(len(ROWS) - 1) + " runs):\n" + fr.table(ROWS) + "\n")


def check(case, source, run, mode, expect, out):
    problems = out.problems(expect)
    record_row(source, run, mode, expect, out, problems)
    case.assertEqual(problems, [], f"{source} {run} ({mode})")


@needs_cli
class TransformersScenarioTest(unittest.TestCase):
    """tests/fixtures/hf/scenarios: real runs of transformers' decode loop, converted."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvscope-scenarios-")
        cls.traces = {}
        for name in sorted(os.listdir(SCENARIOS)):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(SCENARIOS, name), encoding="utf-8") as f:
                doc = json.load(f)
            model = {"gpt2-updated": "gpt2"}.get(doc["model"], doc["model"])  # version 0 of the update
            out = os.path.join(cls.tmp, name[:-5] + ".kvtrace")
            scenario_to_trace.convert(os.path.join(SCENARIOS, name), os.path.join(MODELS, model), out)
            cls.traces[name[:-5]] = (doc, os.path.join(MODELS, model), out)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_every_scenario_with_the_model(self):
        for name, (doc, model, trace) in sorted(self.traces.items()):
            with self.subTest(scenario=name):
                expect = fr.scenario_expectation(doc)
                extra = []
                if doc["model"] == "gpt2-updated":
                    extra = ["--weights-version", "1=" + os.path.join(MODELS, "gpt2-updated")]
                if name.endswith("rng_extra_draw"):
                    # torch's generator cannot be replayed: alone, the run is not evidence.
                    expect = fr.Expectation([])
                out = fr.audit(trace, model=model, extra=extra)
                check(self, "transformers", name.split(".", 1)[1], "model+trace", expect, out)

    def test_torch_sampled_runs_in_trace_mode(self):
        _, _, same = self.traces["gpt2.rng_same_order"]
        _, _, extra = self.traces["gpt2.rng_extra_draw"]
        out = fr.audit(same, reference_trace=same)
        check(self, "transformers", "rng_same_order vs itself", "trace+trace", fr.Expectation([]), out)
        out = fr.audit(extra, reference_trace=same)
        check(self, "transformers", "rng_extra_draw vs rng_same_order", "trace+trace", fr.Expectation(["rng_order"], 0), out)
        ev = next(f for f in out.report["findings"] if f["id"] == "rng_order")["evidence"]
        self.assertEqual(ev["seed"], 1234)
        self.assertGreater(ev["chosen_probability"], 0)
        self.assertGreater(ev["reference_probability"], 0)
        self.assertLessEqual(ev["max_logit_error"], ev["tolerance"])

    def test_sampled_run_alone_says_the_replay_was_not_checked(self):
        _, model, trace = self.traces["gpt2.rng_extra_draw"]
        out = fr.audit(trace, model=model)
        policy = next(s for s in out.report["stages"] if s["id"] == "policy")
        self.assertTrue(any(c.startswith("not checked:") and "'torch'" in c for c in policy["checks"]), policy["checks"])
        self.assertTrue(any(c.startswith("ok:") and "eligible" in c for c in policy["checks"]), policy["checks"])

    def test_stale_cache_value_evidence_needs_both_checkpoints(self):
        doc, model, trace = self.traces["gpt2.stale_cache"]
        both = fr.audit(trace, model=model, extra=["--weights-version", "1=" + os.path.join(MODELS, "gpt2-updated")])
        ev = next(f for f in both.report["findings"] if f["id"] == "stale_cache")["evidence"]
        self.assertLessEqual(ev["reused_vs_old_weights"], ev["tolerance"])
        self.assertGreater(ev["reused_vs_new_weights"], ev["tolerance"])
        self.assertLessEqual(ev["fresh_vs_new_weights"], ev["tolerance"])
        one = fr.audit(trace, model=model)
        self.assertEqual(one.roots, ["stale_cache"])
        cache = next(s for s in one.report["stages"] if s["id"] == "cache")
        unchecked = [c for c in cache["checks"] if c.startswith("not checked:")]
        self.assertEqual(len(unchecked), 1, cache["checks"])
        first = doc["expect"]["weights_changed_before_step"]
        self.assertIn(f"r0s{first}", unchecked[0])
        self.assertIn("--weights-version 1=DIR", unchecked[0])
        self.assertIn("values not checked", one.report["findings"][0]["explanation"])


def _updated_checkpoint(src: str, dst: str, seed: int = 7) -> str:
    """A copy of `src` whose attention k/v projection weights changed, as after a training
    step (the second checkpoint of a weight-update run)."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if not name.endswith(".safetensors"):
            shutil.copy2(os.path.join(src, name), os.path.join(dst, name))
    weights = st_numpy.load_checkpoint(src)
    rng = np.random.default_rng(seed)
    for k, v in list(weights.items()):
        if any(p in k for p in ("k_proj.weight", "v_proj.weight", "attn.c_attn.weight")):
            w = v.astype(np.float32)
            weights[k] = w + 0.3 * float(np.abs(w).mean()) * rng.standard_normal(w.shape).astype(np.float32)
    st_numpy.save_file(os.path.join(dst, "model.safetensors"), weights, {"format": "pt"})
    return dst


PROMPTS = {"gpt2": [33, 85, 68, 300, 290, 926, 995, 302, 434, 847, 275, 768, 89, 978, 14],
           "llama": [0, 34, 86, 69, 301, 291, 938, 1014, 303, 435, 856, 276, 781, 90, 996, 15]}
SAMPLED = {"temperature": 0.8, "seed": 4321}

# name -> (bug spec, sampled?, expectation). Steps count as the trace does (0 = prefill).
ENGINE_RUNS = {
    "clean": (None, False, fr.Expectation([])),
    "clean sampled": (None, True, fr.Expectation([])),
    "wrong_layer L1<-L0 from s2": ("wrong_layer:layer=1,source=0,step=2", False, fr.Expectation(["wrong_layer"], 2, 1)),
    "wrong_layer L2<-L1 from s3": ("wrong_layer:layer=2,source=1,step=3", False, fr.Expectation(["wrong_layer"], 3, 2)),
    "wrong_layer sampled": ("wrong_layer:layer=2,source=0,step=3", True, fr.Expectation(["wrong_layer"], 3, 2)),
    "cross_request at s4": ("cross_request:step=4", False, fr.Expectation(["cross_request"], 4, 0)),
    "wrong_layer + cross_request": ("wrong_layer:layer=1,source=0,step=1+cross_request:step=4", False,
                                    fr.Expectation(["wrong_layer", "cross_request"], 1, 1)),
    "duplicate_append from s2": ("duplicate_append:step=2", False, fr.Expectation(["duplicate_append"], 2, 0)),
    "wrong_position -1 from s2": ("wrong_position:offset=-1,step=2", False, fr.Expectation(["position"], 2, 0)),
    "positions_from_zero": ("positions_from_zero:step=1", False, fr.Expectation(["position"], 1, 0)),
    "stale_cache at s4": ("stale_cache:step=4", False, fr.Expectation(["stale_cache"], 4)),
}


@needs_torch
@needs_cli
class IndependentEngineTest(unittest.TestCase):
    """tests/independent: a PyTorch engine that shares no code with KV Scope's core."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvscope-engine-")
        cls.updated = {m: _updated_checkpoint(os.path.join(MODELS, m), os.path.join(cls.tmp, m + "-updated"))
                       for m in PROMPTS}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def _record(self, model, dtype, name, bug=None, sampled=False, uncached=False, model_dir=None):
        out = os.path.join(self.tmp, f"{model}.{dtype}.{name.replace(' ', '_')}{'.uncached' if uncached else ''}.kvtrace")
        kw = dict(SAMPLED) if sampled else {}
        second = self.updated[model] if bug and "stale_cache" in bug else None
        summary = record_run.record(model_dir or os.path.join(MODELS, model), out, PROMPTS[model], 10, dtype=dtype,
                                    bug=bug, uncached=uncached, second_model=second, **kw)
        return out, summary

    def _matrix(self, dtype):
        for model in PROMPTS:
            for name, (bug, sampled, expect) in ENGINE_RUNS.items():
                with self.subTest(model=model, dtype=dtype, run=name):
                    trace, _ = self._record(model, dtype, name, bug, sampled)
                    extra = ["--weights-version", "1=" + self.updated[model]] if bug and "stale_cache" in bug else []
                    out = fr.audit(trace, model=os.path.join(MODELS, model), extra=extra)
                    check(self, f"engine {model} {dtype}", name, "model+trace", expect, out)

    def test_float32_runs(self):
        self._matrix("float32")

    def test_bfloat16_runs(self):
        self._matrix("bfloat16")

    def test_float16_runs(self):
        """float16 compute (emulated: every op rounded to float16), a few rows."""
        for model in PROMPTS:
            for name in ("clean", "clean sampled", "wrong_layer L2<-L1 from s3", "wrong_position -1 from s2"):
                bug, sampled, expect = ENGINE_RUNS[name]
                with self.subTest(model=model, run=name):
                    trace, _ = self._record(model, "float16", name, bug, sampled)
                    check(self, f"engine {model} float16", name, "model+trace", expect,
                          fr.audit(trace, model=os.path.join(MODELS, model)))

    def test_quantized_cache(self):
        """KV Scope's addition: a quantised cache (int8, fp8; quantized_cache.py rounds with
        frexp, KV Scope with log2) audits clean against the rounded reference, and a wrong
        dequantisation scale at two layers and two steps is kv_quantization there."""
        for model in PROMPTS:
            for dtype in ("float32", "bfloat16"):
                for fmt in ("int8", "fp8_e4m3"):
                    with self.subTest(model=model, dtype=dtype, fmt=fmt):
                        trace, _ = self._record(model, dtype, f"kv-{fmt}", f"kv_cache:format={fmt}")
                        check(self, f"engine {model} {dtype}", f"{fmt} cache clean", "model+trace",
                              fr.Expectation([]), fr.audit(trace, model=os.path.join(MODELS, model)))
                        for layer, step in ((0, 1), (2, 3)):
                            bug = f"kv_quantization:format={fmt},layer={layer},step={step}"
                            trace, _ = self._record(model, dtype, f"kvq-{fmt}-{layer}-{step}", bug)
                            check(self, f"engine {model} {dtype}", f"{fmt} scale x2 L{layer} s{step}",
                                  "model+trace", fr.Expectation(["kv_quantization"], step, layer),
                                  fr.audit(trace, model=os.path.join(MODELS, model)))
                # Static per-layer scales (calibrated on the prefill, like vLLM's k_scale/v_scale),
                # then read back with another scale than they were written with (SGLang's FP8
                # KV scales were silently left at 1.0: sgl-project/sglang#18818).
                trace, _ = self._record(model, dtype, "kv-static", "kv_cache:format=fp8_e4m3,static=1")
                check(self, f"engine {model} {dtype}", "fp8_e4m3 static scales clean", "model+trace",
                      fr.Expectation([]), fr.audit(trace, model=os.path.join(MODELS, model)))
                trace, _ = self._record(model, dtype, "kvq-static",
                                        "kv_quantization:format=fp8_e4m3,static=1,layer=1,step=2,scale=50")
                check(self, f"engine {model} {dtype}", "fp8_e4m3 static scale x0.5 L1 s2", "model+trace",
                      fr.Expectation(["kv_quantization"], 2, 1), fr.audit(trace, model=os.path.join(MODELS, model)))

    def test_rope_scaling(self):
        """KV Scope's addition: llama checkpoints with linear and llama3 rope_scaling (the
        independent engine computes llama3's frequencies its own way, from transformers'
        rule) audit clean; a decode path that drops the scaling from step 1 (every layer) or
        step 3 (layer 1 only) is rope_scaling there, also trace+trace against the uncached run
        (the traces carry model.rope_parameters). gpt2 has no RoPE: the bug does not apply."""
        scalings = {"linear": {"rope_type": "linear", "factor": 2.0},
                    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}
        for kind, rope in scalings.items():
            ckpt = record_run.make_rope_checkpoint(os.path.join(MODELS, "llama"),
                                                   os.path.join(self.tmp, f"llama-{kind}"), rope)
            for dtype in ("float32", "bfloat16"):
                with self.subTest(rope=kind, dtype=dtype):
                    src = f"engine llama-{kind} {dtype}"
                    clean, _ = self._record("llama", dtype, f"rope-{kind}-clean", model_dir=ckpt)
                    check(self, src, f"{kind} rope_scaling clean", "model+trace", fr.Expectation([]),
                          fr.audit(clean, model=ckpt))
                    for step, layer in ((1, -1), (3, 1)):
                        trace, _ = self._record("llama", dtype, f"rope-{kind}-{step}-{layer}",
                                                f"rope_scaling:step={step},layer={layer}", model_dir=ckpt)
                        out = fr.audit(trace, model=ckpt)
                        where = "every layer" if layer < 0 else f"L{layer}"
                        check(self, src, f"scaling dropped from s{step}, {where}", "model+trace",
                              fr.Expectation(["rope_scaling"], step, max(layer, 0)), out)
                        f = next(x for x in out.report["findings"] if x["id"] == "rope_scaling")
                        self.assertEqual(f["evidence"]["hypothesis"], 1)  # the factor dropped
                        self.assertLessEqual(f["evidence"]["rerotated_key_error"], f["evidence"]["tolerance"])
                        if kind == "linear":  # the right key at 2p: not a position offset
                            self.assertEqual(f["evidence"]["equivalent_position"], 2 * f["evidence"]["first_position"])
                    # Without the checkpoint: the traces' model.rope_parameters carry the scaling.
                    uncached, _ = self._record("llama", dtype, f"rope-{kind}-clean", uncached=True, model_dir=ckpt)
                    check(self, src, f"{kind} clean vs its uncached run", "trace+trace", fr.Expectation([]),
                          fr.audit(clean, reference_trace=uncached))
                    check(self, src, "scaling dropped from s3, L1 vs uncached", "trace+trace",
                          fr.Expectation(["rope_scaling"], 3, 1), fr.audit(trace, reference_trace=uncached))
        with self.assertRaises(ValueError):
            self._record("gpt2", "float32", "rope-gpt2", "rope_scaling")
        ROWS.append(["engine gpt2", "rope_scaling", "-", "n/a (no RoPE)", "bug refused", "-", "ok"])

    def test_chunked_prefill(self):
        """KV Scope's addition: a chunked prefill (4 prompt tokens per forward over the cache,
        every chunk but the last choosing nothing) audits clean; positions computed per chunk
        (restarting at 0) from chunk 1 or 2 are chunk_position at that chunk's step: the ids
        themselves (layer 0, model+trace and trace+trace against the uncached run) and, on
        llama, the ids right but layer 1 rotated at the chunk-local ones (model+trace). gpt2
        takes its positions once, at the input: a per-layer position does not exist there."""
        for model in PROMPTS:
            for dtype in ("float32", "bfloat16"):
                with self.subTest(model=model, dtype=dtype):
                    src = f"engine {model} {dtype}"
                    ckpt = os.path.join(MODELS, model)
                    clean, _ = self._record(model, dtype, "chunked", "prefill_chunk:size=4")
                    check(self, src, "chunked prefill clean (4 per chunk)", "model+trace",
                          fr.Expectation([]), fr.audit(clean, model=ckpt))
                    uncached, _ = self._record(model, dtype, "clean", uncached=True)
                    check(self, src, "chunked prefill clean vs its uncached run", "trace+trace",
                          fr.Expectation([]), fr.audit(clean, reference_trace=uncached))
                    for chunk in (1, 2):
                        for layer in (-1, 1) if model == "llama" else (-1,):
                            bug = f"chunk_position:size=4,chunk={chunk},layer={layer}"
                            trace, _ = self._record(model, dtype, f"chunkpos-{chunk}-{layer}", bug)
                            where = "the ids" if layer < 0 else f"L{layer} rotated"
                            run = f"positions restart from chunk {chunk}, {where}"
                            out = fr.audit(trace, model=ckpt)
                            check(self, src, run, "model+trace",
                                  fr.Expectation(["chunk_position"], chunk, max(layer, 0)), out)
                            f = next(x for x in out.report["findings"] if x["id"] == "chunk_position")
                            ev = f["evidence"]
                            self.assertEqual(ev["chunk"], chunk)
                            self.assertEqual(ev["chunk_start"], 4 * chunk)
                            self.assertEqual(ev["earlier_chunks_exact"], 1)
                            self.assertEqual(ev["restarted"], 1)
                            self.assertLessEqual(ev["records_vs_chunk_positions"], ev["tolerance"])
                            if layer < 0:
                                check(self, src, run + " vs uncached", "trace+trace",
                                      fr.Expectation(["chunk_position"], chunk, 0),
                                      fr.audit(trace, reference_trace=uncached))
        with self.assertRaises(ValueError):
            self._record("gpt2", "float32", "chunkpos-gpt2-layer", "chunk_position:layer=1")
        ROWS.append(["engine gpt2", "chunk_position layer=1", "-", "n/a (positions at the input)",
                     "bug refused", "-", "ok"])

    def test_speculative_decoding(self):
        """KV Scope's addition: greedy speculative decoding with prompt-lookup drafts, the
        rejected ones cropped (clean), and a cache whose crop() is a no-op from step 2
        (speculative_rollback at the first step that left rows; its positions come from the
        inflated cache length, a consequence linked to it)."""
        for model in PROMPTS:
            for dtype in ("float32", "bfloat16"):
                with self.subTest(model=model, dtype=dtype):
                    trace, _ = self._record(model, dtype, "speculative", "speculative:draft=3")
                    check(self, f"engine {model} {dtype}", "speculative clean (3 drafts)", "model+trace",
                          fr.Expectation([]), fr.audit(trace, model=os.path.join(MODELS, model)))
                    trace, info = self._record(model, dtype, "speculative_rollback",
                                               "speculative_rollback:draft=3,step=2")
                    skipped = [i for i in info["injected"] if i["bug"] == "speculative_rollback"][0]
                    self.assertIsNotNone(skipped["step"], "a step should have rejected drafts")
                    out = fr.audit(trace, model=os.path.join(MODELS, model))
                    check(self, f"engine {model} {dtype}", "speculative_rollback from s2", "model+trace",
                          fr.Expectation(["speculative_rollback"], skipped["step"], 0), out)
                    if dtype == "float32":
                        self.assertIn("position", out.consequences)
        # Partly accepted drafts (2 proposed, 1 accepted at one step): the crop keeps the right rows.
        prompt = PROMPTS["gpt2"][:6] * 2 + PROMPTS["gpt2"][:2]
        out_path = os.path.join(self.tmp, "gpt2.speculative-partial.kvtrace")
        record_run.record(os.path.join(MODELS, "gpt2"), out_path, prompt, 10, bug="speculative:draft=3")
        import kvscope_trace as kvtrace
        accepted = [s.accepted_count for s in kvtrace.read_trace(out_path).steps]
        self.assertTrue(any(a > 0 for a in accepted), accepted)
        check(self, "engine gpt2 float32", "speculative clean, drafts partly accepted", "model+trace",
              fr.Expectation([]), fr.audit(out_path, model=os.path.join(MODELS, "gpt2")))

    def test_bfloat16_tolerances_are_the_ones_exercised(self):
        trace, _ = self._record("llama", "bfloat16", "clean")
        out = fr.audit(trace, model=os.path.join(MODELS, "llama"))
        self.assertEqual(out.report["dtype"], "bfloat16")
        self.assertIn("bfloat16", out.report["tolerance_rule"])
        steps = out.report["steps"]
        # Real bf16 noise sits above the float32 tolerance and below the bf16 one.
        worst = max(max(s["key_error"]) for s in steps)
        self.assertGreater(worst, 1e-2, "the bf16 run should carry bf16-sized noise")
        for s in steps:
            for err, tol in zip(s["key_error"], s["key_tolerance"]):
                self.assertLessEqual(err, tol)
            self.assertLess(s["key_tolerance"][0], s["key_tolerance"][-1], "the tolerance grows with depth")

    def test_tie_rule(self):
        for model in PROMPTS:
            for dtype in ("float32", "bfloat16"):
                with self.subTest(model=model, dtype=dtype):
                    tied = os.path.join(self.tmp, f"{model}-tied-{dtype}")
                    info = record_run.make_tied_checkpoint(os.path.join(MODELS, model), tied, PROMPTS[model], tie_step=2,
                                                           dtype=dtype)
                    trace, _ = self._record(model, dtype, "tie_rule", "tie_rule", model_dir=tied)
                    out = fr.audit(trace, model=tied)
                    check(self, f"engine {model} {dtype}", "tie_rule (highest index)", "model+trace",
                          fr.Expectation(["tie_rule"], info["step"]), out)

    def test_sampled_runs_in_trace_mode(self):
        for model in PROMPTS:
            for dtype in ("float32", "bfloat16"):
                with self.subTest(model=model, dtype=dtype):
                    clean, _ = self._record(model, dtype, "pair clean", None, True)
                    uncached, _ = self._record(model, dtype, "pair clean", None, True, uncached=True)
                    extra, _ = self._record(model, dtype, "pair extra draw", "rng_extra_draw", True)
                    src = f"engine {model} {dtype}"
                    check(self, src, "clean sampled vs itself", "trace+trace", fr.Expectation([]),
                          fr.audit(clean, reference_trace=clean))
                    check(self, src, "clean sampled vs its uncached run", "trace+trace", fr.Expectation([]),
                          fr.audit(clean, reference_trace=uncached))
                    check(self, src, "rng_extra_draw vs uncached", "trace+trace", fr.Expectation(["rng_order"]),
                          fr.audit(extra, reference_trace=uncached))

    def test_batch_variance(self):
        """KV Scope's addition: two prompts run alone (the reference trace, a cached run) and as
        one batch with batch-invariant kernels audit clean, bit for bit; a split-K projection
        chosen by the batch size from step 1 at layer 0 or step 3 at layer 1 is batch_variance
        there (trace+trace: only a solo run isolates the batch)."""
        for model, prompt in PROMPTS.items():
            prompts = [prompt, list(reversed(prompt[:9]))]
            for dtype in ("float32", "bfloat16"):
                with self.subTest(model=model, dtype=dtype):
                    src = f"engine {model} {dtype}"
                    path = lambda name: os.path.join(self.tmp, f"{model}.{dtype}.batch-{name}.kvtrace")
                    solo = batched_runs.record_pair(os.path.join(MODELS, model), path("solo"), prompts, 6,
                                                    dtype=dtype)["out"]
                    batched = batched_runs.record_pair(os.path.join(MODELS, model), path("invariant"), prompts, 6,
                                                       dtype=dtype, batched=True)["out"]
                    check(self, src, "batch-invariant batch vs solo runs", "trace+trace", fr.Expectation([]),
                          fr.audit(batched, reference_trace=solo))
                    for step, layer in ((1, 0), (3, 1)):
                        bug = f"batch_variance:step={step},layer={layer}"
                        trace = batched_runs.record_pair(os.path.join(MODELS, model), path(f"split-{step}-{layer}"),
                                                         prompts, 6, dtype=dtype, batched=True, bug=bug)["out"]
                        out = fr.audit(trace, reference_trace=solo)
                        check(self, src, f"split-K by batch size from s{step} L{layer}", "trace+trace",
                              fr.Expectation(["batch_variance"], step, layer), out)
                        f = next(x for x in out.report["findings"] if x["id"] == "batch_variance")
                        self.assertLess(f["evidence"]["logit_error_over_tolerance"], 1.0)

    def test_window_wrap(self):
        """KV Scope's addition: sliding-window checkpoints (Mistral: every layer; Qwen2: the layers
        from max_window_layers = 1) audit clean with a growing cache and with a ring of S = W = 6
        slots per sliding layer (ring_cache.py, the trace's ring_positions), with the model and
        against the uncached run, also when the prefill is longer than the ring; a ring that writes one slot
        early once it wraps (window_wrap) at one layer is window_wrap where the engine first
        wrote past the wrap (prompt 4 tokens: cache index 6 at step 3; a prefill of 10 crosses
        the wrap itself and loses entry 5 at step 0) and at that layer."""
        src, W = os.path.join(MODELS, "llama"), 6
        make = record_run.make_window_checkpoint
        ckpts = {"mistral": (make(src, os.path.join(self.tmp, "mistral-w6"), "mistral", W), (0, 1)),
                 "qwen2": (make(src, os.path.join(self.tmp, "qwen2-w6"), "qwen2", W, max_window_layers=1), (1, 2))}
        for arch, (ckpt, layers) in ckpts.items():
            for dtype in ("float32", "bfloat16"):
                with self.subTest(arch=arch, dtype=dtype):
                    name = f"engine {arch}-window{W} {dtype}"
                    def rec(run, prompt=PROMPTS["llama"][:4], **kw):
                        return record_run.record(ckpt, os.path.join(self.tmp, f"{arch}.{dtype}.{run}.kvtrace"), prompt,
                                                 10, dtype=dtype, **kw)
                    uncached = rec("uncached", uncached=True)["out"]
                    check(self, name, f"window {W}, growing cache clean", "model+trace", fr.Expectation([]),
                          fr.audit(rec("grow")["out"], model=ckpt))
                    ring = rec("ring", bug="ring_window")["out"]
                    check(self, name, f"ring of {W} slots clean", "model+trace", fr.Expectation([]), fr.audit(ring, model=ckpt))
                    check(self, name, f"ring of {W} slots clean vs uncached", "trace+trace", fr.Expectation([]),
                          fr.audit(ring, reference_trace=uncached))
                    long = rec("ring-long", PROMPTS["llama"][:10], bug="ring_window")["out"]
                    check(self, name, "ring clean, prefill of 10 into 6 slots", "model+trace", fr.Expectation([]),
                          fr.audit(long, model=ckpt))
                    for layer, n in [(l, 4) for l in layers] + [(layers[0], 10)]:
                        s = rec(f"wrap-{layer}-{n}", PROMPTS["llama"][:n], bug=f"window_wrap:layer={layer}")
                        (acted,) = s["injected"]  # the step that wrote cache index W, one slot early
                        self.assertEqual((acted["layer"], acted["step"], acted["cache_index"]), (layer, max(0, W + 1 - n), W))
                        expect = fr.Expectation(["window_wrap"], acted["step"], layer)
                        run = f"ring one slot early past the wrap, L{layer}" + (f", prefill of {n}" if n > W else "")
                        check(self, name, run, "model+trace", expect, fr.audit(s["out"], model=ckpt))
                        if n <= W:
                            check(self, name, run + " vs uncached", "trace+trace", expect,
                                  fr.audit(s["out"], reference_trace=uncached))

    def test_prefix_reuse(self):
        """KV Scope's addition: prefix-cache hits (foreign_prefix.py) audit clean; a block matched
        without its last token is prefix_reuse at the reusing request's step 0, layer and position."""
        foreign_prefix.run_rows(self, check, PROMPTS, MODELS, self.tmp)


def _deep_llama(dst: str, layers: int, std: float = 0.05, seed: int = 3) -> str:
    """A random-weight Llama of the fixture's width with `layers` layers (HF names, one
    F32 file, the fixture's tokenizer): depth for the tolerance and trace+trace tests."""
    src = os.path.join(MODELS, "llama")
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name.endswith(".json") and name != "config.json":
            shutil.copy2(os.path.join(src, name), dst)
    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["num_hidden_layers"] = layers
    with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    raw = st_numpy.load_checkpoint(src)
    rng = np.random.default_rng(seed)
    weights = {k: v.astype(np.float32) for k, v in raw.items() if ".layers." not in k}
    for i in range(layers):
        for k, v in raw.items():
            if k.startswith("model.layers.0."):
                w = np.ones(v.shape, np.float32) if "norm" in k else std * rng.standard_normal(v.shape).astype(np.float32)
                weights[k.replace("model.layers.0.", f"model.layers.{i}.")] = w
    st_numpy.save_file(os.path.join(dst, "model.safetensors"), weights, {"format": "pt"})
    return dst


@needs_torch
@needs_cli
class DeepModelTest(unittest.TestCase):
    """44 layers: drift must stay drift deep down, and a jump at one layer is that layer."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvscope-deep-")
        cls.model = _deep_llama(os.path.join(cls.tmp, "llama-44"), 44)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def _record(self, name, **kw):
        out = os.path.join(self.tmp, name + ".kvtrace")
        record_run.record(self.model, out, PROMPTS["llama"], 8, **kw)
        return out

    def test_bfloat16_drift_and_a_jump_at_layer_4(self):
        src = "engine llama-44 bfloat16"
        check(self, src, "clean", "model+trace", fr.Expectation([]),
              fr.audit(self._record("clean-bf16", dtype="bfloat16"), model=self.model))
        out = fr.audit(self._record("wl4-bf16", dtype="bfloat16", bug="wrong_layer:layer=4,source=3,step=3"), model=self.model)
        check(self, src, "wrong_layer L4<-L3 from s3", "model+trace", fr.Expectation(["wrong_layer"], 3, 4), out)

    def test_trace_pair_without_a_model_finds_layer_40(self):
        import kvscope_trace as kvtrace
        clean = self._record("clean")
        f16 = lambda path: (kvtrace.write_trace(kvtrace.read_trace(path), path + ".f16", dtype="F16"), path + ".f16")[1]
        uncached = f16(self._record("uncached", uncached=True))
        whole = f16(self._record("wl40", bug="wrong_layer:layer=40,source=39,step=6"))
        # A loop that stores layer 39's new records as layer 40's (records only, no snapshots).
        t = kvtrace.read_trace(clean)
        for s in t.steps:
            for rec in s.layers:
                rec.cache_keys = rec.cache_values = rec.checksum_k = rec.checksum_v = None
            if s.step >= 6:
                s.layers[40].keys, s.layers[40].values = s.layers[39].keys.copy(), s.layers[39].values.copy()
        records = os.path.join(self.tmp, "records40.kvtrace")
        kvtrace.write_trace(t, records, dtype="F16")
        # Checksums come with the optional xxhash module; CTest runs this pair with it and
        # without it (python_foreign_audit_no_xxhash): the verdicts must not depend on it.
        sums = kvtrace.trace.HAVE_XXHASH
        if os.environ.get("CI") and os.environ.get("KVSCOPE_TRACE_XXHASH") != "0":
            self.assertTrue(sums, "CI installs python3-xxhash (scripts/setup.sh)")
        src = "engine llama-44 float32, F16 storage, " + ("checksums" if sums else "no checksums (no xxhash)")
        clean16 = f16(clean)
        self.assertEqual(any(s.layers and s.layers[0].checksum_k for s in kvtrace.read_trace(clean16).steps), sums)
        out = fr.audit(clean16, reference_trace=uncached)
        check(self, src, "clean vs uncached", "trace+trace", fr.Expectation([]), out)
        if sums:  # the checksums of the rounded rows were checked, and held
            rows = next(s for s in out.report["stages"] if "earlier rows" in json.dumps(s))
            self.assertIn("ok: earlier rows unchanged", json.dumps(rows))
        for name, trace in (("whole-cache L40<-L39 from s6", whole), ("records L40<-L39 from s6", records)):
            out = fr.audit(trace, reference_trace=uncached)
            check(self, src, name, "trace+trace", fr.Expectation(["wrong_layer"], 6, 40), out)
            f = out.report["findings"][0]
            self.assertEqual(f["first_check"], "layer 40's cache source and append")
            self.assertEqual(f["evidence"]["source_layer"], 39)
            self.assertGreaterEqual(f["confidence"], 0.9)
            self.assertIn("layer 39's reference", f["explanation"])


@needs_cli
class LeftPaddingTest(unittest.TestCase):
    def test_position_offsets_count_real_tokens(self):
        """A left-padded row whose engine applied positions 2 too high while recording the
        right ones: the offset is 2 (real tokens), not 2 minus the 3 padding columns."""
        import subprocess
        import kvscope_trace as kvtrace
        with tempfile.TemporaryDirectory() as tmp:
            raw, mine = os.path.join(tmp, "batch.kvtrace"), os.path.join(tmp, "mine.kvtrace")
            subprocess.run([fr.cli_path(), "generate", "--model", os.path.join(MODELS, "llama"), "--ids", "5,6,7,8,9,10,11,12",
                            "--ids", "20,21,22,23,24", "--batch", "--max-new", "4", "--fault",
                            "wrong_position:offset=2,step=0,request=1", "--trace", raw], check=True, capture_output=True)
            t = kvtrace.read_trace(raw)
            padded = next(s for s in t.steps if s.request == 1 and s.step == 0)
            self.assertEqual(padded.fed_mask, [0, 0, 0, 1, 1, 1, 1, 1])
            for s in t.steps:  # record the positions the engine should have used
                if s.request == 1:
                    s.positions = [p - 2 if s.fed_mask is None or s.fed_mask[i] else p for i, p in enumerate(s.positions)]
            t.engine, t.faults = "my_decode_loop.py", []
            kvtrace.write_trace(t, mine)
            out = fr.audit(mine, model=os.path.join(MODELS, "llama"))
            check(self, "own loop llama", "left-padded row, positions applied +2", "model+trace",
                  fr.Expectation(["position"], 0, 0, first_request=1), out)
            ev = out.report["findings"][0]["evidence"]
            self.assertEqual(ev["offset"], 2)
            self.assertEqual(ev["computed_at_position"], 2)


if __name__ == "__main__":
    unittest.main()
