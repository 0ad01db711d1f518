"""The trace document's optional "kv_cache" object: a quantised cache's element type and
scales (docs/trace-format.md "Quantised caches"), validated like the C++ reader
(TraceKvCacheJson.cpp). The records of such a trace are the dequantised values the
attention read."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from .container import TraceError, _Obj

DTYPES = ("int8", "fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0")
BLOCK_DTYPES = ("q8_0", "q4_0")  # ggml's: a float16 scale per block of 32 elements
SCALES = ("per_token_head", "per_layer", "per_block")


def parse_kv_cache(doc: Dict[str, Any], file: str, num_layers: int) -> Optional[Dict[str, Any]]:
    """The validated kv_cache object (None when absent)."""
    if doc.get("kv_cache") is None:
        return None
    j = doc["kv_cache"]
    if not isinstance(j, dict):
        raise TraceError(file, "kv_cache", "expected an object")
    o = _Obj(j, file, "kv_cache")
    dtype = o.string("dtype")
    if not dtype:
        o.fail("dtype", "missing")
    if dtype not in DTYPES:
        o.fail("dtype", f"unknown cache dtype '{dtype}' (known: {', '.join(DTYPES)})")
    blocks = dtype in BLOCK_DTYPES
    scale = o.string("scale", "per_block" if blocks else "per_token_head")
    if scale not in SCALES:
        o.fail("scale", f"unknown scale '{scale}' (expected per_token_head, per_layer or per_block)")
    if blocks != (scale == "per_block"):
        o.fail("scale", f"{dtype} stores a scale per block: scale must be per_block" if blocks
               else f"scale per_block is ggml's (q8_0, q4_0), not {dtype}'s")
    out: Dict[str, Any] = {"dtype": dtype, "scale": scale}
    for k in ("k_scales", "v_scales"):
        if scale in ("per_token_head", "per_block"):
            if o.has(k):
                o.fail(k, f"{scale} scales are read from the records: k_scales and v_scales "
                       "must be absent")
            continue
        v = j.get(k)
        if not isinstance(v, list):
            o.fail(k, "expected an array of numbers, one per layer")
        if len(v) != num_layers:
            o.fail(k, f"{k} holds {len(v)} scales, expected one per layer ({num_layers})")
        for x in v:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
                o.fail(k, f"{k} must be positive and finite")
        out[k] = [float(x) for x in v]
    return out
