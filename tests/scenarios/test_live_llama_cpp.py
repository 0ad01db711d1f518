"""llama.cpp itself as the engine under audit: llama-cpp-python built from the pinned source
package (scripts/live-python.sh --llama-cpp) runs GGUFs that llama.cpp's own converter made
from transformers checkpoints, and `kvscope-record --engine llama.cpp` records its runs: the
logits of every step and the sequence's cache as llama.cpp serialises it
(llama_state_seq_get_data).

- Clean runs, greedy and sampled, f16 / q8_0 / q4_0 caches, F16 and Q8_0 weights, Llama
  (the converter permutes its key heads) and Qwen3 (it does not): audit clean against the
  GGUF, and the F16 Llama's also against the HF checkpoint it was converted from.
- The state llama.cpp saves at the end (llama_state_seq_save_file, what llama-server's
  /slots/{id}?action=save writes) audits clean by itself (`--trace FILE.ggsq`).
- A prompt-cache reuse off by one token (llama.cpp issue 1884's shape), reproduced through
  llama.cpp's own API: request 1 shares 6 prompt tokens with request 0, but 7 cells are
  copied to it (llama_memory_seq_cp(0, 1, 0, 7)) and it decodes from position 7. Recorded as
  the prefix hit the engine believed it made, it is `prefix_reuse` at request 1's first step,
  layer 0, position 6; its saved state (one sequence: no other request to name) is `position`
  (token ownership) at layer 0, position 6. The same reuse with 6 cells is clean.

- Gemma 3 (tests/fixtures/llama_state/gemma3-swa: five sliding layers over 8 tokens, one
  global) and Gemma 2 (made here: alternating layers, soft-capped, a SentencePiece vocabulary),
  whose caches llama.cpp keeps in two (iswa): a greedy run inside the window and its
  saved state, a run twice as long as the window, and a prompt longer than the window (fed a
  window at a time: chunked prefill) audit clean against the HF checkpoint; a saved state
  longer than the window is refused naming the numbers (llama.cpp no longer holds the sliding
  layers' first rows).

One table: engine x family x run -> expected, got, where. Needs the live virtualenv and
KVSCOPE_LLAMA_CPP (its site/ on PYTHONPATH); CI runs it as ctest python_live_llama_cpp.
"""

from __future__ import annotations

import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "tests", "fixtures", "llama_state"))
import foreign_runs as fr  # noqa: E402
from engine_table import EngineTable, where  # noqa: E402
import gguf_convert  # noqa: E402

LLAMA_CPP = os.environ.get("KVSCOPE_LLAMA_CPP", "")
try:
    import llama_cpp  # noqa: F401
    import torch  # the checkpoints are written by transformers
    import transformers
    from kvscope_trace import hf_trace
    from kvscope_trace import trace as kvtrace
    from kvscope_trace.llama_cpp_trace import LlamaCppSession
    from make_llama_state_fixtures import hd32_checkpoint, save_gemma
except ImportError as e:
    raise unittest.SkipTest(f"needs llama_cpp, torch and transformers ({e})")
if not os.path.isfile(os.path.join(LLAMA_CPP, "llama.cpp", "convert_hf_to_gguf.py")):
    raise unittest.SkipTest("needs KVSCOPE_LLAMA_CPP: the folder scripts/live-python.sh --llama-cpp prints")

PROMPT = [5, 17, 300, 41, 99, 7, 12, 250, 3, 64]
OTHER = PROMPT[:6] + [88, 91, 33, 47]
ENGINE = f"llama.cpp (llama-cpp-python {llama_cpp.__version__})"
TABLE = EngineTable(ENGINE + " under audit")


def tearDownModule():
    TABLE.print_and_clear()


def convert(model: str, outtype: str, out: str) -> None:
    gguf_convert.convert(os.path.join(LLAMA_CPP, "llama.cpp"), model, outtype, out)


def gemma2_checkpoint(out: str) -> None:
    """A tiny Gemma 2 (transformers, seeded): 4 layers alternating sliding (window 8) and global,
    both soft-caps, query_pre_attn_scalar = head_dim (as llama.cpp scales queries), with a
    SentencePiece tokenizer.model trained here (llama.cpp's converter reads Gemma 2's vocabulary
    from one; KV Scope reads it too)."""
    import random
    import sentencepiece as spm

    os.makedirs(out, exist_ok=True)
    words = ("the cache of a model holds keys and values for every layer and position the audit "
             "compares them with a reference computed without any cache sliding window").split()
    rng = random.Random(3)
    corpus = os.path.join(out, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.writelines(" ".join(rng.choice(words) for _ in range(12)) + "\n" for _ in range(2000))
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(out, "tokenizer"), vocab_size=400,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0, pad_id=0,
                                   eos_id=1, bos_id=2, unk_id=3, minloglevel=2)
    for f in ("corpus.txt", "tokenizer.vocab"):
        os.remove(os.path.join(out, f))
    torch.manual_seed(34)
    cfg = transformers.Gemma2Config(
        vocab_size=400, hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=8, max_position_embeddings=128,
        rms_norm_eps=1e-6, initializer_range=0.2, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    save_gemma(transformers.Gemma2ForCausalLM(cfg), out)


class LlamaCppUnderAuditTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = cls.tmp.name
        cls.hf = {"llama": os.path.join(root, "llama-hf"),
                  "qwen3": os.path.join(REPO, "tests", "fixtures", "families", "models", "qwen3")}
        hd32_checkpoint(cls.hf["llama"])  # head_dim 32: the quantised caches apply
        cls.gguf = {}
        cls.hf["gemma3_text"] = os.path.join(REPO, "tests", "fixtures", "llama_state", "gemma3-swa")
        cls.hf["gemma2"] = os.path.join(root, "gemma2-hf")
        gemma2_checkpoint(cls.hf["gemma2"])
        for family, outtype in (("llama", "f16"), ("llama", "q8_0"), ("qwen3", "f16"), ("gemma3_text", "f16"),
                                ("gemma2", "f16")):
            cls.gguf[family, outtype] = os.path.join(root, f"{family}-{outtype}.gguf")
            convert(cls.hf[family], outtype, cls.gguf[family, outtype])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, family: str, run: str, trace: str, model: str, expect: fr.Expectation,
              position=None) -> fr.Outcome:
        got = fr.audit(trace, model=model)
        TABLE.add(ENGINE, family, run, ", ".join(expect.findings) or "clean",
                  ", ".join(got.roots) or got.verdict or got.error, where(got.first))
        problems = got.problems(expect)
        if position is not None and (got.first or {}).get("position") != position:
            problems.append(f"first position {(got.first or {}).get('position')} != {position}")
        self.assertEqual(problems, [], got.report.get("findings", got.error))
        return got

    def record(self, gguf: str, out: str, *extra: str, prompt=PROMPT, max_new: int = 8) -> None:
        self.assertEqual(hf_trace.main(["--engine", "llama.cpp", "--model", gguf,
                                        "--prompt-ids", ",".join(map(str, prompt)), "--max-new", str(max_new),
                                        "--ignore-eos", "--out", out, *extra]), 0)

    def iswa_record(self, family: str, name: str, max_new: int, *extra: str, prompt=PROMPT[:5]) -> str:
        out = os.path.join(self.tmp.name, name + ".kvtrace")
        self.record(self.gguf[family, "f16"], out, *extra, prompt=prompt, max_new=max_new)
        w = kvtrace.TraceWriter.from_trace(kvtrace.read_trace(out), dtype="F16")
        w.model["fingerprint"] = ""  # llama.cpp ran the GGUF; the audit's model is the HF checkpoint
        w.save(out)
        return out

    def test_iswa_caches(self):
        """Gemma 3 (five sliding layers, one global) and Gemma 2 (alternating, soft-capped), both
        with a window of 8: llama.cpp's iswa cache."""
        for family in ("gemma3_text", "gemma2"):
            with self.subTest(family=family):
                hf = self.hf[family]
                # 5 prompt tokens and 3 greedy ones: 7 cells, inside the window; the state saved
                # at the end holds every cell in both caches.
                state = os.path.join(self.tmp.name, f"{family}-short.ggsq")
                out = self.iswa_record(family, f"{family}-short", 3, "--save-state", state)
                self.check(family, "greedy inside the window (iswa cache) vs the HF checkpoint", out, hf,
                           fr.Expectation())
                self.check(family, "  its saved state (.ggsq, two caches)", state, hf, fr.Expectation())
                # 12 greedy tokens: 16 cells, twice the window. Every step's own rows are still in
                # the sliding layers' cache when the recorder reads it; the earlier ones are gone.
                out = self.iswa_record(family, f"{family}-long", 12)
                self.assertEqual(sum(len(s.fed_ids) for s in kvtrace.read_trace(out).steps), 16)
                self.check(family, "greedy past the window (16 cells, window 8)", out, hf, fr.Expectation())
                # A prompt longer than the window: fed in chunks of the window (chunked prefill),
                # each chunk's rows read while the sliding layers still hold them.
                out = self.iswa_record(family, f"{family}-long-prompt", 4, prompt=PROMPT + OTHER[6:])
                steps = kvtrace.read_trace(out).steps
                self.assertEqual([len(s.fed_ids) for s in steps[:2]], [8, 6])
                self.assertEqual(steps[0].chosen, -1)
                self.check(family, "14-token prompt fed 8 at a time, 4 greedy", out, hf, fr.Expectation())
                # Fed at once, the state llama.cpp saves lacks the sliding layers' first rows.
                s = LlamaCppSession(self.gguf[family, "f16"], 32)
                tokens = PROMPT + OTHER[6:]
                s.decode(tokens, list(range(len(tokens))))
                state = os.path.join(self.tmp.name, f"{family}-long-prompt.ggsq")
                s.save_state(state, tokens)
                got = fr.audit(state, model=hf)
                self.assertIn("swa cell_count", got.error)
                TABLE.add(ENGINE, family, "  a 14-cell state (.ggsq), window 8", "refused", "refused: swa cell_count",
                          "-")

    def test_clean_runs_audit_clean(self):
        sampled = ["--temperature", "0.8", "--top-k", "40", "--seed", "5"]
        runs = [("llama", "f16", "greedy, f16 cache", []),
                ("llama", "f16", "sampled, f16 cache", sampled),
                ("llama", "f16", "greedy, q8_0 cache", ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
                                                         "--flash-attn", "on"]),
                ("llama", "f16", "sampled, q4_0 cache", sampled + ["--cache-type-k", "q4_0", "--cache-type-v",
                                                                   "q4_0", "--flash-attn", "on"]),
                ("llama", "q8_0", "greedy, Q8_0 weights", []),
                ("qwen3", "f16", "greedy, f16 cache", []),
                ("qwen3", "f16", "sampled, V transposed (no flash attention)", sampled + ["--flash-attn", "off"])]
        for family, weights, run, extra in runs:
            with self.subTest(family=family, run=run):
                out = os.path.join(self.tmp.name, f"{family}-{weights}-{len(TABLE.rows)}.kvtrace")
                state = out.replace(".kvtrace", ".ggsq")
                self.record(self.gguf[family, weights], out, "--save-state", state, *extra)
                gguf = self.gguf[family, weights]
                self.check(family, f"{run} ({weights} GGUF)", out, gguf, fr.Expectation())
                if "q8_0 cache" in run:
                    self.assertEqual(kvtrace.read_trace(out).extra["kv_cache"]["dtype"], "q8_0")
                self.check(family, f"{run}: saved state (.ggsq)", state, gguf, fr.Expectation())
                if (family, weights) == ("llama", "f16") and "f16 cache" in run:
                    # The file llama.cpp ran is not the HF checkpoint (the audit says so by its
                    # fingerprint): the same run without it, against the weights it came from.
                    w = kvtrace.TraceWriter.from_trace(kvtrace.read_trace(out), dtype="F16")
                    w.model["fingerprint"] = ""
                    anonymous = out.replace(".kvtrace", ".anonymous.kvtrace")
                    w.save(anonymous)
                    self.check(family, f"{run} vs the HF checkpoint", anonymous, self.hf[family], fr.Expectation())

    def reuse(self, cells: int, name: str):
        """Request 0 runs PROMPT; request 1 (OTHER, sharing PROMPT's first 6 tokens) takes
        `cells` of its cells with llama_memory_seq_cp and decodes the rest, as a prompt cache
        that reuses them would. Recorded as the prefix hit the engine made."""
        s = LlamaCppSession(self.gguf["llama", "f16"], 64, sequences=2)
        w = kvtrace.TraceWriter(s.model_info(self.gguf["llama", "f16"]), engine=s.engine_name(), dtype="F16")
        policy = {"temperature": 0.0, "generator": "kvscope"}
        done = {}
        for rid, prompt in ((0, PROMPT), (1, OTHER)):
            w.add_request(rid, prompt, policy=policy, max_new_tokens=3, stop_reason="running")
            start = 0
            if rid == 1:
                llama_cpp.llama_memory_seq_cp(s.memory(), 0, 1, 0, cells)
                start = cells
            fed, pos, stream, had = prompt[start:], list(range(start, len(prompt))), list(prompt), 0
            for step in range(3):
                logits = s.decode(fed, pos, rid)
                layers = s.cache(rid)
                t = int(np.argmax(logits))
                keys = [k[0][:, had:] for k, _ in layers]
                values = [v[0][:, had:] for _, v in layers]
                w.add_step(rid, step, fed, pos, chosen=t, logits=logits, keys=keys, values=values,
                           events=["arrival"] if step == 0 else [],
                           reused_count=start if step == 0 else 0, reused_from=0 if step == 0 and start else -1)
                had = layers[0][0].shape[2]
                fed, pos = [t], [len(stream)]
                stream.append(t)
            w.update_request(rid, generated=stream[len(prompt):], stop_reason="max_new_tokens")
            done[rid] = stream[:-1]  # the cache holds all but the last chosen token
        trace = os.path.join(self.tmp.name, name + ".kvtrace")
        w.save(trace)
        state = os.path.join(self.tmp.name, name + ".ggsq")
        s.save_state(state, done[1], 1)
        return trace, state

    def test_prompt_cache_reuse_off_by_one_is_found(self):
        gguf = self.gguf["llama", "f16"]
        trace, state = self.reuse(6, "reuse-6")
        self.check("llama", "prompt-cache reuse of 6 shared tokens", trace, gguf, fr.Expectation())
        self.check("llama", "  its saved state (.ggsq)", state, gguf, fr.Expectation())
        trace, state = self.reuse(7, "reuse-7")
        self.check("llama", "reuse off by one (seq_cp of 7 cells)", trace, gguf,
                   fr.Expectation(["prefix_reuse"], first_step=0, first_layer=0, first_request=1), position=6)
        # One sequence's state names no other request: token ownership at the corrupted cell.
        self.check("llama", "  its saved state (.ggsq)", state, gguf,
                   fr.Expectation(["position"], first_step=0, first_layer=0), position=6)


if __name__ == "__main__":
    unittest.main()
