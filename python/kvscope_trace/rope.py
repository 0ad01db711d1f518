"""The model block's optional "rope_parameters" object: the RoPE scaling the engine ran with
(docs/trace-format.md "RoPE scaling"), in HuggingFace's rope_parameters names and validated
like the C++ reader (TraceJson.cpp). kvscope-cli's trace+trace audit reads it to tell a RoPE
scaling mismatch (rope_scaling) apart from other key errors."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from .container import TraceError

TYPES = ("default", "linear", "llama3", "dynamic")


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
    for k in ("rope_theta", "factor", "low_freq_factor", "high_freq_factor"):
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
    if kind == "llama3":
        if original is None:
            fail("original_max_position_embeddings", "required for llama3 RoPE scaling")
        if not j.get("high_freq_factor", 4.0) > j.get("low_freq_factor", 1.0):
            fail("high_freq_factor", "must exceed low_freq_factor for llama3 RoPE scaling")
    return j
