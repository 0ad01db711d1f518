#!/usr/bin/env python3
"""Convert a transformers-recorded bug scenario (tests/fixtures/hf/scenarios/NAME.json +
NAME.safetensors) into a KV Scope trace, the way a researcher would: one step per forward
call, its fed ids and position ids, the logits row that chose the token, and the whole
`past_key_values` of every layer after the step as a cache snapshot (kvscope_trace
derives the appended records from consecutive snapshots).

    python3 tests/scenarios/scenario_to_trace.py SCENARIO.json MODEL_DIR OUT.kvtrace

Nothing here knows which bug a scenario holds: the expected diagnosis stays in the JSON for
the test that audits the trace.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any, Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # kvscope_trace: installed, else the source
import kvscope_trace as kvtrace  # noqa: E402


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """The float32 tensors of a safetensors file (the scenarios store nothing else)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in ("F32", "I64"):
            raise ValueError(f"{path}: tensor {name} is {t['dtype']}, expected F32 or I64")
        begin, end = t["data_offsets"]
        dt = np.float32 if t["dtype"] == "F32" else np.int64
        out[name] = np.frombuffer(buf, dtype=dt, count=(end - begin) // np.dtype(dt).itemsize,
                                  offset=8 + n + begin).reshape(t["shape"])
    return out


def _model_info(model_dir: str, compute_dtype: str = "float32") -> Dict[str, Any]:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    heads = c.get("n_head", c.get("num_attention_heads"))
    hidden = c.get("n_embd", c.get("hidden_size"))
    return {"architecture": c.get("model_type", ""),
            "num_layers": c.get("n_layer", c.get("num_hidden_layers")),
            "num_heads": heads,
            "num_kv_heads": c.get("num_key_value_heads", heads),
            "head_dim": c.get("head_dim") or hidden // heads,
            "vocab_size": c["vocab_size"],
            "max_positions": c.get("n_positions", c.get("max_position_embeddings", 0)),
            "directory": os.path.abspath(model_dir),
            "fingerprint": kvtrace.model_fingerprint(model_dir),
            "stored_dtype": kvtrace.model_stored_dtype(model_dir),
            "compute_dtype": compute_dtype}


def _policy(doc: Dict[str, Any]) -> Dict[str, Any]:
    """What the recording loop used: greedy unless the scenario sampled (torch.multinomial
    with a seeded torch.Generator, which KV Scope cannot replay)."""
    e = doc.get("expect", {})
    if e.get("temperature"):
        return {"temperature": float(e["temperature"]), "seed": int(e.get("seed", 0)), "generator": "torch"}
    return {"temperature": 0.0}


def convert(json_path: str, model_dir: str, out_path: str) -> kvtrace.Trace:
    with open(json_path, encoding="utf-8") as f:
        doc = json.load(f)
    info = _model_info(model_dir)
    w = kvtrace.TraceWriter(info, engine="transformers " + doc.get("versions", {}).get("transformers", "?"))
    policy = _policy(doc)
    steps: List[Dict[str, Any]] = doc.get("steps", [])
    if not steps:  # only ids and the error the engine raised (context overflow)
        _convert_without_tensors(doc, w, policy)
        w.save(out_path)
        return w.to_trace()
    tensors = read_safetensors(os.path.splitext(json_path)[0] + ".safetensors")
    L = info["num_layers"]
    per_request: Dict[int, List[Dict[str, Any]]] = {}
    for s in steps:
        per_request.setdefault(int(s["request"]), []).append(s)
    for rid, rs in sorted(per_request.items()):
        prompt = rs[0]["input_ids"]
        generated = [int(s["token"]) for s in rs]
        w.add_request(rid, prompt, generated=generated, policy=policy, max_new_tokens=len(generated),
                      stop_reason="max_new_tokens", arrival_tick=steps.index(rs[0]))
    for tick, s in enumerate(steps):
        key = f"r{s['request']}.s{s['step']}"
        logits = tensors[key + ".logits"]
        w.add_step(int(s["request"]), int(s["step"]), s["input_ids"], s["positions"], chosen=int(s["token"]),
                   logits=logits[-1], tick=tick, slot=0,
                   cache_keys=[tensors[f"{key}.layer{l}.k"] for l in range(L)],
                   cache_values=[tensors[f"{key}.layer{l}.v"] for l in range(L)],
                   weights_version=int(s.get("weights_version", 0)))
    w.save(out_path)
    return w.to_trace()


def _convert_without_tensors(doc: Dict[str, Any], w: kvtrace.TraceWriter, policy: Dict[str, Any]) -> None:
    """Prompt, generated ids and the failed feed: the steps carry ids and positions only."""
    prompt, generated = doc["prompt_ids"], doc["generated"]
    w.add_request(0, prompt, generated=generated, policy=policy, stop_reason="unknown")
    w.add_step(0, 0, prompt, list(range(len(prompt))), tick=0)
    for k, tok in enumerate(generated):
        w.add_step(0, k + 1, [tok], [len(prompt) + k], tick=k + 1)
    if doc.get("hf_error"):
        w.add_event("note", tick=len(generated), detail="engine error: " + doc["hf_error"])


def main(argv: List[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    convert(*argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
