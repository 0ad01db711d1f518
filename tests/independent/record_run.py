#!/usr/bin/env python3
"""Record a run of the independent torch engine as a KV Scope trace.

    python3 tests/independent/record_run.py --model DIR --prompt-ids 1,2,3 --max-new N \
        [--dtype float32|bfloat16|float16] [--temperature T --seed S] \
        [--bug NAME[:k=v,...][+NAME...]] [--second-model DIR2] [--uncached] --out FILE.kvtrace

    python3 tests/independent/record_run.py make-tied --model DIR --prompt-ids 1,2,3 \
        --out NEW_DIR [--tie-step K] [--dtype ...]

The first form decodes and writes the trace (docs/trace-format.md) with kvscope_trace:
every step's logits row and the FULL cache of every layer after the step (a full-snapshot
trace, what dumping `past_key_values` gives), in the order the engine ran the steps; with a
ring cache (ring_window, window_wrap) the new records, occupied slots, slot maps and (with
xxhash) slot-order checksums instead, and `layer_kinds` for every sliding-window model. It
prints a JSON summary (generated tokens, where the bug acted). The second form writes a
copy of a checkpoint whose output head has two identical rows (make_tied_checkpoint), for
the tie_rule bug. Bug syntax: see torch_engine.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(REPO, "python"))  # kvscope_trace: the installed package, else the source
import kvscope_trace as kvtrace  # noqa: E402
import st_numpy  # noqa: E402
from torch_engine import DecodeEngine, Model, RunLog, parse_bug  # noqa: E402
from torch_mla import load_model  # noqa: E402

ENGINE_NAME = "torch_engine.py"


def write_trace(run: RunLog, model: Model, out_path: str) -> None:
    """Writes a RunLog as a version-2 KV Scope trace (snapshots of every layer, logits,
    engine order as ticks, the cache object index as the slot)."""
    directory = run.weights_dirs[0]
    info = model.model_info(fingerprint=kvtrace.model_fingerprint(directory),
                            stored_dtype=kvtrace.model_stored_dtype(directory))
    info["directory"] = os.path.abspath(directory)
    w = kvtrace.TraceWriter(info, engine=ENGINE_NAME, mode=run.mode)
    if run.layer_kinds:  # sliding-window layers (ring_slots: a ring cache, whose maps add_step takes)
        w.extra["layer_kinds"] = run.layer_kinds
    first_tick = {}
    for i, s in enumerate(run.steps):
        first_tick.setdefault(s.request, i)
    for r in run.requests:
        w.add_request(r["id"], r["prompt_ids"], generated=r["generated"], policy=r["policy"],
                      max_new_tokens=r["max_new_tokens"], eos_ids=[], stop_reason="max_new_tokens",
                      arrival_tick=r.get("arrival_tick", first_tick.get(r["id"], 0)),
                      batch_group=r.get("batch_group", -1))
    for i, s in enumerate(run.steps):
        layers = dict(cache_keys=s.cache_keys, cache_values=s.cache_values)
        if s.ring:  # a ring cache: the new records, occupied slots, slot maps, slot-order checksums
            sums = [[kvtrace.cache_checksum(c) for c in s.ring[f"contents_{x}"]] for x in "kv"]
            layers = dict(keys=s.ring["keys"], values=s.ring["values"], cache_lengths=s.ring["cache_lengths"],
                          ring_positions=s.ring["ring_positions"],
                          **(dict(checksums_k=sums[0], checksums_v=sums[1]) if kvtrace.trace.HAVE_XXHASH else {}))
        w.add_step(request=s.request, step=s.step, fed_ids=s.fed_ids, positions=s.positions,
                   chosen=s.chosen, logits=s.logits, **layers, weights_version=s.weights_version,
                   events=s.events, tick=getattr(s, "tick", i), slot=s.slot, rng_draws_before=s.rng_before,
                   rng_draws_after=s.rng_after, draft_count=s.draft_count,
                   accepted_count=s.accepted_count, reused_count=getattr(s, "reused_count", 0),  # prefix_cache.py
                   reused_from=getattr(s, "reused_from", -1), reused_blocks=getattr(s, "reused_blocks", None))
    if run.kv_cache:  # a quantised cache declares its element type and scales
        w.extra["kv_cache"] = run.kv_cache
    if len(run.weights_dirs) > 1:  # the engine swapped checkpoints (stale_cache)
        w.extra["weights_checkpoints"] = [
            {"weights_version": v, "directory": os.path.abspath(d), "fingerprint": kvtrace.model_fingerprint(d)}
            for v, d in enumerate(run.weights_dirs)]
    w.save(out_path)


def record(model_dir: str, out_path: str, prompt_ids: List[int], max_new: int,
           dtype: str = "float32", temperature: float = 0.0, seed: int = 0, bug=None,
           uncached: bool = False, second_model: Optional[str] = None) -> Dict[str, object]:
    """Runs the engine (cached, or the uncached reference) and writes the trace. Returns
    a summary: generated tokens per request, the bugs as parsed, where each acted
    (`injected`), the number of steps and the output path."""
    model = load_model(model_dir, dtype)
    engine = DecodeEngine(model, bug, second_model)
    if uncached:
        run = engine.run_uncached(list(prompt_ids), max_new, temperature, seed)
    else:
        run = engine.run_cached(list(prompt_ids), max_new, temperature, seed)
    write_trace(run, model, out_path)
    return {"out": out_path, "mode": run.mode, "dtype": dtype,
            "generated": list(run.requests[0]["generated"]),
            "requests": {r["id"]: list(r["generated"]) for r in run.requests},
            "bugs": parse_bug(bug), "injected": run.injected, "steps": len(run.steps),
            "tied_steps": [s.step for s in run.steps if s.request == 0 and len(s.tied) > 1]}


# ----------------------------------------------------------------------------- tied checkpoint

def _head_tensor_name(model: Model, names) -> str:
    """The weight whose rows are the output head: lm_head.weight when the model uses it,
    else the (tied) token embedding."""
    cfg = model.cfg
    if cfg.model_type == "gpt2":
        if not cfg.tie and "lm_head.weight" in names:
            return "lm_head.weight"
        return "transformer.wte.weight" if "transformer.wte.weight" in names else "wte.weight"
    if "lm_head.weight" in names:
        return "lm_head.weight"
    return "model.embed_tokens.weight"


def _greedy(model: Model, prompt_ids: List[int], steps: int):
    run = DecodeEngine(model).run_cached(list(prompt_ids), steps)
    return run.requests[0]["generated"], [s.logits for s in run.steps]


def make_rope_checkpoint(src_dir: str, dst_dir: str, rope_parameters: Dict[str, object]) -> str:
    """A copy of the Llama checkpoint `src_dir` in `dst_dir` whose config.json carries
    `rope_parameters` (e.g. {"rope_type": "llama3", "factor": 8.0, ...}; rope_theta kept
    unless given) instead of its own RoPE settings; weights and tokenizer files copied."""
    if os.path.abspath(src_dir) == os.path.abspath(dst_dir):
        raise ValueError(f"{dst_dir}: the copy must go to another directory than {src_dir}")
    os.makedirs(dst_dir, exist_ok=True)
    for name in os.listdir(src_dir):
        if name != "config.json" and os.path.isfile(os.path.join(src_dir, name)):
            shutil.copy2(os.path.join(src_dir, name), os.path.join(dst_dir, name))
    with open(os.path.join(src_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    old = cfg.pop("rope_parameters", None) or {}
    theta = old.get("rope_theta", cfg.pop("rope_theta", 10000.0))
    cfg.pop("rope_scaling", None)
    cfg["rope_parameters"] = {"rope_theta": theta, **rope_parameters}
    with open(os.path.join(dst_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    return dst_dir


def make_window_checkpoint(src_dir: str, dst_dir: str, arch: str, window: int,
                           max_window_layers: Optional[int] = None, seed: int = 5) -> str:
    """A copy of the Llama checkpoint `src_dir` in `dst_dir` as a sliding-window model:
    `mistral` (sliding_window on every layer) or `qwen2` (use_sliding_window, the layers from
    max_window_layers on slide; random q/k/v biases added, which Qwen2 has). Same weights
    otherwise, F32, tokenizer files copied."""
    if arch not in ("mistral", "qwen2") or os.path.abspath(src_dir) == os.path.abspath(dst_dir):
        raise ValueError(f"make_window_checkpoint: arch {arch!r} (mistral, qwen2) into a new directory")
    os.makedirs(dst_dir, exist_ok=True)
    for name in os.listdir(src_dir):
        if name.endswith(".json") and name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy2(os.path.join(src_dir, name), os.path.join(dst_dir, name))
    with open(os.path.join(src_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    weights = {k: v.astype(np.float32) for k, v in st_numpy.load_checkpoint(src_dir).items()}
    cfg.update(model_type=arch, architectures=["MistralForCausalLM" if arch == "mistral" else "Qwen2ForCausalLM"],
               sliding_window=int(window))
    if arch == "qwen2":
        for k in ("attention_bias", "mlp_bias", "pretraining_tp"):
            cfg.pop(k, None)
        cfg.update(use_sliding_window=True, max_window_layers=int(max_window_layers or 0))
        rng = np.random.default_rng(seed)
        for name in [n for n in weights if n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))]:
            rows = weights[name].shape[0]
            weights[name[:-len("weight")] + "bias"] = (0.1 * rng.standard_normal(rows)).astype(np.float32)
    with open(os.path.join(dst_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    st_numpy.save_file(os.path.join(dst_dir, "model.safetensors"), weights, {"format": "pt"})
    return dst_dir


def make_tied_checkpoint(src_dir: str, dst_dir: str, prompt_ids: List[int], tie_step: int = 1,
                         dtype: str = "float32", token_b: Optional[int] = None) -> Dict[str, object]:
    """Writes a copy of checkpoint `src_dir` to `dst_dir` (config and tokenizer files
    copied, weights re-written as one F32 model.safetensors) whose output-head row B equals
    row A, where A is the token the clean greedy run picks at step `tie_step` on
    `prompt_ids` and B > A is an id that appears nowhere in that run (the highest that
    ties bit-exactly, or `token_b`). The tie then decides that greedy step: lowest-id
    greedy keeps A and reproduces the clean run, highest-id greedy takes B. Returns
    {"token_a", "token_b", "step", "tensor", "clean_tokens"}; ValueError when no B ties."""
    if os.path.abspath(src_dir) == os.path.abspath(dst_dir):
        raise ValueError(f"{dst_dir}: the tied copy must go to another directory than {src_dir}")
    src = Model(src_dir, dtype)
    clean, _ = _greedy(src, prompt_ids, tie_step + 1)
    a = clean[tie_step]
    raw = st_numpy.load_checkpoint(src_dir)
    head = _head_tensor_name(src, raw)
    V = src.cfg.vocab_size
    used = set(prompt_ids) | set(clean)
    candidates = [token_b] if token_b is not None else [b for b in range(V - 1, a, -1) if b not in used][:16]
    if not candidates or candidates[0] is None or candidates[0] <= a:
        raise ValueError(f"{src_dir}: no id above token A={a} to tie with")
    os.makedirs(dst_dir, exist_ok=True)
    for name in os.listdir(src_dir):
        path = os.path.join(src_dir, name)
        if os.path.isfile(path) and not name.endswith(".safetensors") and name != "model.safetensors.index.json":
            shutil.copy2(path, os.path.join(dst_dir, name))
    for b in candidates:
        weights = dict(raw)
        rows = weights[head].astype(np.float32).copy()
        rows[b] = rows[a]
        weights[head] = rows
        st_numpy.save_file(os.path.join(dst_dir, "model.safetensors"), weights, {"format": "pt"})
        tied, logits = _greedy(Model(dst_dir, dtype), prompt_ids, tie_step + 1)
        row = logits[tie_step]
        if tied == clean and row[a] == row[b] == row.max():
            return {"token_a": int(a), "token_b": int(b), "step": tie_step, "tensor": head,
                    "clean_tokens": [int(t) for t in clean]}
    raise ValueError(f"{src_dir}: no candidate row B ties bit-exactly with A={a} at step {tie_step}")


# ----------------------------------------------------------------------------- CLI

def _ids(text: str) -> List[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token ids, got {text!r}") from None


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "make-tied":
        ap = argparse.ArgumentParser(prog="record_run.py make-tied",
                                     description="copy a checkpoint with two identical output rows")
        ap.add_argument("--model", required=True)
        ap.add_argument("--prompt-ids", type=_ids, required=True)
        ap.add_argument("--out", required=True, help="the new checkpoint directory")
        ap.add_argument("--tie-step", type=int, default=1)
        ap.add_argument("--dtype", default="float32")
        args = ap.parse_args(argv[1:])
        try:
            info = make_tied_checkpoint(args.model, args.out, args.prompt_ids, args.tie_step, args.dtype)
        except (ValueError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(json.dumps(info))
        return 0
    ap = argparse.ArgumentParser(prog="record_run.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF checkpoint directory (config.json + safetensors)")
    ap.add_argument("--prompt-ids", type=_ids, required=True, help="comma-separated token ids")
    ap.add_argument("--max-new", type=int, required=True, help="tokens to generate (= steps)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ap.add_argument("--seed", type=int, default=0, help="torch.Generator seed of request 0")
    ap.add_argument("--bug", default=None, help="NAME[:k=v,...][+NAME...] (see torch_engine.py)")
    ap.add_argument("--second-model", default=None, help="checkpoint swapped in by stale_cache")
    ap.add_argument("--uncached", action="store_true", help="record the full-prefix reference run")
    ap.add_argument("--out", required=True, help="the .kvtrace file to write")
    args = ap.parse_args(argv)
    try:
        summary = record(args.model, args.out, args.prompt_ids, args.max_new, dtype=args.dtype,
                         temperature=args.temperature, seed=args.seed, bug=args.bug,
                         uncached=args.uncached, second_model=args.second_model)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
