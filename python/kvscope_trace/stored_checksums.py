"""The cache checksums a trace stored in reduced precision (F16, BF16) can carry, for the writer.

A checksum is XXH3-64 of a layer's cache row as the file stores it, read back as float32
(docs/trace-format.md, "Checksums"): the audit rebuilds the row from the stored records and
hashes that. A checksum an engine took of its float32 cache therefore holds in an F16 file
only where rounding to F16 changes none of the values it covers. For each step and layer:

* the step's snapshot of the layer is what the checksum covers (it hashes to it): the
  checksum becomes the hash of the stored (rounded) snapshot;
* otherwise, every record the request appended to the layer since its last `cache_reset`
  survives the rounding bit for bit (a cache of a bfloat16 engine stored as BF16): the
  checksum stands as it is. A correct cache holds only those values (rings, rollbacks and
  prefix hits rearrange or drop them), and a rewritten one fails either way;
* otherwise it is left out (the audit then says `not checked` for earlier rows), since the
  hash of values the file does not store cannot be checked against it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .container import stored_values
from .trace import cache_checksum

Pair = Tuple[Optional[str], Optional[str]]


def _survives(a: Optional[np.ndarray], dtype: str) -> bool:
    """Storing `a` as `dtype` reads back the same float32 bits (NaN payloads included)."""
    if a is None:
        return True
    a = np.ascontiguousarray(a, dtype="<f4")
    return bool(np.array_equal(stored_values(a, dtype).view("<u4"), a.view("<u4")))


def _from_snapshot(rec: Any, dtype: str) -> Optional[Pair]:
    """The checksums of the stored snapshot, when the step's checksums are of its snapshot."""
    if rec.cache_keys is None:
        return None
    if _survives(rec.cache_keys, dtype) and _survives(rec.cache_values, dtype):
        return rec.checksum_k, rec.checksum_v
    f32 = cache_checksum(rec.cache_keys), cache_checksum(rec.cache_values)
    if f32[0] is None or f32 != (rec.checksum_k, rec.checksum_v):
        return None  # no xxhash, or the engine hashed something other than its snapshot
    return (cache_checksum(stored_values(rec.cache_keys, dtype)),
            cache_checksum(stored_values(rec.cache_values, dtype)))


def for_storage(trace: Any, dtype: str) -> Optional[List[List[Pair]]]:
    """Per step, per layer entry, the (key, value) checksums to write when the trace's float
    tensors are stored as `dtype`; None when they are written as they are (F32)."""
    if dtype == "F32":
        return None
    exact: Dict[Tuple[int, int], bool] = {}  # (request, layer entry) -> all records survive so far
    out: List[List[Pair]] = []
    for s in trace.steps:
        if "cache_reset" in s.events:
            for key in [k for k in exact if k[0] == s.request]:
                del exact[key]
        row: List[Pair] = []
        for j, rec in enumerate(s.layers):
            key = (s.request, j)
            exact[key] = exact.get(key, True) and _survives(rec.keys, dtype) and _survives(rec.values, dtype)
            pair: Pair = (rec.checksum_k, rec.checksum_v)
            if pair[0] and pair[1]:
                snap = _from_snapshot(rec, dtype)
                if snap is not None:
                    pair = snap
                elif not exact[key]:
                    pair = (None, None)
            row.append(pair)
        out.append(row)
    return out
