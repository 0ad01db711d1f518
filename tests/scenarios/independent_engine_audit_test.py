"""The audit on the independent engine's runs (tests/independent: a PyTorch engine that shares
no code with KV Scope's core): gpt2 and llama, float32, bfloat16 and float16 compute, greedy
and torch-sampled, clean and with every bug the engine can reproduce; each must give the
expected root findings, first step and first layer, nothing else. One table of all rows is
printed (test_foreign_audit.py's rules and table).

CTest runs it as `python_engine_audit` against the uninstrumented kvscope-cli only: its 150-odd
audits took 3x as long under ASan (docs/limits.md), and the sanitizer suite runs the same rows
through the core's own tests; test_foreign_audit.py, under both, keeps the transformers
scenarios, the 44-layer pair and the left-padded run.

Run: /usr/bin/python3 -m unittest discover -s tests/scenarios -p "independent_engine_audit_test.py"
(needs numpy, torch and a built kvscope-cli; $KVSCOPE_CLI names it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest

import numpy as np

import foreign_runs as fr
import test_foreign_audit as rows
from test_foreign_audit import HAVE_TORCH, MODELS, PROMPTS, ROWS, check, needs_cli, needs_torch

if HAVE_TORCH:
    import batched_runs
    import foreign_prefix
    import record_run
    import st_numpy


def tearDownModule():
    rows.tearDownModule()


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
