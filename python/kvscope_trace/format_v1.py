"""Reading version-1 KV Scope traces (docs/trace-format.md, "Version 1"), for trace.py.

Version 1 keeps the step table as an array of objects (`steps[i].positions`) and one
tensor per step and layer (`step{i}.logits`, `step{i}.layer{l}.k|v|cache_k|cache_v`), with
the cache checksums as hex strings in the step objects. Only what differs from version 2
lives here: trace.py reads the fields both versions share (its parse_step, handed in)
and derives appended records and cache lengths for both (kvtrace._attach_layers).
Errors keep the version-1 field names (`steps[1].positions`, `step2.logits`)."""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from .container import TraceError, _Container, _Obj

VERSION = 1

# step fields version 1 knows; others are kept in Step.extra
KNOWN_FIELDS = {"request", "step", "tick", "slot", "fed_ids", "positions", "fed_mask", "chosen",
                "rng_draws_before", "rng_draws_after", "weights_version", "events",
                "cache_lengths", "checksums_k", "checksums_v"}


def _hex(s: _Obj, k: str, v: str) -> str:
    if not v or len(v) > 16 or any(c not in "0123456789abcdefABCDEF" for c in v):
        s.fail(k, f"expected a 64-bit hex checksum, found '{v}'")
    return f"{int(v, 16):016x}"


def parse_steps(sj: Any, file: str, parse_step: Callable[[_Obj, int], Any]) -> List[Any]:
    """The document's `steps` array. parse_step(obj, i) reads the fields version 2 shares and
    returns a kvtrace.Step whose layers hold the declared cache lengths."""
    if not isinstance(sj, list):
        raise TraceError(file, "steps", "expected an array (trace version 1)")
    steps = []
    for i, stj in enumerate(sj):
        s = _Obj(stj, file, f"steps[{i}]")
        st = parse_step(s, i)
        ck, cv = s.strings("checksums_k"), s.strings("checksums_v")
        if (ck and len(ck) != len(st.layers)) or len(ck) != len(cv):
            s.fail("checksums_k", "one checksum per layer for keys and values expected")
        if ck:
            for l, rec in enumerate(st.layers):
                rec.checksum_k = _hex(s, "checksums_k", ck[l])
                rec.checksum_v = _hex(s, "checksums_v", cv[l])
        st.extra = {k: v for k, v in stj.items() if k not in KNOWN_FIELDS}
        steps.append(st)
    return steps


def load_tensors(f: _Container, trace: Any) -> List[Optional[list]]:
    """Sets each step's logits and returns, per step, None (no layer data) or per layer
    [keys, values, cache_keys, cache_values] as stored (keys None for a snapshot alone)."""
    path, m = f.path, trace.model
    L, H, D, V = m["num_layers"], m["num_kv_heads"], m["head_dim"], m["vocab_size"]
    Dv = m.get("value_head_dim") or D
    stored: List[Optional[list]] = []
    for i, s in enumerate(trace.steps):
        key = f"step{i}"
        if f"{key}.logits" in f:
            s.logits = f.read_float(f"{key}.logits")
            if s.logits.shape != (V,):
                raise TraceError(path, f"{key}.logits", f"shape {list(s.logits.shape)} but "
                                 f"model.vocab_size is {V}")
        elif s.chosen >= 0:
            raise TraceError(path, f"{key}.logits", f"steps[{i}] chose a token but its logits row "
                             "is missing (truncated trace?)")
        if f"{key}.layer0.k" not in f and f"{key}.layer0.cache_k" not in f:
            stored.append(None)
            continue
        layers = []
        for l in range(L):
            base = f"{key}.layer{l}"
            k = v = ck = cv = None
            if f"{base}.cache_k" in f:
                ck, cv = f.read_records(f"{base}.cache_k", H, D), f.read_records(f"{base}.cache_v", H, Dv)
            if f"{base}.k" in f:
                k, v = f.read_records(f"{base}.k", H, D), f.read_records(f"{base}.v", H, Dv)
            elif ck is None:
                raise TraceError(path, f"{base}.k", "missing (truncated trace?)")
            layers.append([k, v, ck, cv])
        stored.append(layers)
    return stored
