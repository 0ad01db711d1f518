"""The model block's optional "rope_parameters" object: the RoPE scaling the engine ran with
(docs/trace-format.md "RoPE scaling"), in HuggingFace's rope_parameters names and validated
like the C++ reader (TraceJson.cpp). kvscope-cli's trace+trace audit reads it to tell a RoPE
scaling mismatch (rope_scaling) apart from other key errors."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from .container import TraceError

TYPES = ("default", "linear", "llama3", "dynamic", "yarn", "longrope")


def parse_rope(model: Dict[str, Any], file: str) -> Optional[Dict[str, Any]]:
    """The validated model.rope_parameters (None when absent)."""
    j = model.get("rope_parameters")
    if j is None:
        return None
    where = "model.rope_parameters"
    if not isinstance(j, dict):
        raise TraceError(file, where, "expected an object")

    def fail(k: str, what: str):
        raise TraceError(file, f"{where}.{k}", what)

    kind = j.get("rope_type", "default")
    if not isinstance(kind, str) or kind not in TYPES:
        fail("rope_type", f"unknown RoPE type '{kind}' (known: {', '.join(TYPES)})")
    for k in ("rope_theta", "factor", "low_freq_factor", "high_freq_factor", "attention_factor", "beta_fast",
              "beta_slow"):
        v = j.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            fail(k, f"expected a number, found {v!r}")
        if not (v > 0 and math.isfinite(v)):
            fail(k, "must be a positive number")
    original = j.get("original_max_position_embeddings")
    if original is not None and (isinstance(original, bool) or not isinstance(original, int) or original < 1):
        fail("original_max_position_embeddings", f"expected a positive integer, found {original!r}")
    if kind in ("llama3", "yarn", "longrope") and original is None:
        fail("original_max_position_embeddings", f"required for {kind} RoPE scaling")
    if kind == "llama3" and not j.get("high_freq_factor", 4.0) > j.get("low_freq_factor", 1.0):
        fail("high_freq_factor", "must exceed low_freq_factor for llama3 RoPE scaling")
    for k in ("mscale", "mscale_all_dim"):  # yarn (DeepSeek): any finite number
        v = j.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            fail(k, "expected a number")
    if j.get("truncate") is not None and not isinstance(j["truncate"], bool):
        fail("truncate", "expected true or false")
    for k in ("short_factor", "long_factor"):  # longrope: one positive divisor per rotary pair
        v = j.get(k)
        if v is None:
            if kind == "longrope":
                fail(k, "required for longrope")
            continue
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, (int, float)) or
                                          not (x > 0 and math.isfinite(x)) for x in v):
            fail(k, "expected a list of positive numbers")
    return j
