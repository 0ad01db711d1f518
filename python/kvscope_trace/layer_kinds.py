"""The trace document's optional "layer_kinds" array: per model layer, full, sliding-window or
chunked attention (Llama 4: a query sees only its own chunk of `chunk` positions) and, for a
sliding or chunked layer, whether its cache is a ring of `ring_slots` physical slots
(docs/trace-format.md, "Sliding-window layers and ring caches"); or a recurrent layer, whose
cache is a recurrent state rather than K/V rows (Qwen3.5's Gated DeltaNet layers: no window,
chunk or ring; it holds no K/V records, so every step appends 0 to it, its cache length is 0
and no layer{l}.k / .v tensors exist); or a latent layer (DeepSeek's multi-head latent attention:
its keys are latent rows and its values the roped key parts, model.value_head_dim wide). Validated like the C++ reader; the array itself is
kept in Trace.extra, as read. The ring slot maps (the `ring_positions` tensor,
`steps.ring_row`) are read and written by format_v2.py, which asks this module which of the
trace's layers are ring layers (and which are recurrent)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .container import TraceError, _is_int

KINDS = ("full", "sliding", "chunked", "recurrent", "latent")
MAX_SLOTS = 1 << 28  # the largest window or ring the C++ reader takes


def parse_layer_kinds(doc: Dict[str, Any], file: str, num_layers: int) -> Optional[List[Dict[str, Any]]]:
    """The validated entries (None when the field is absent): {"kind", "window", "chunk",
    "ring_slots"}, each 0 where it does not apply."""
    if doc.get("layer_kinds") is None:
        return None
    j = doc["layer_kinds"]
    if not isinstance(j, list) or len(j) != num_layers:
        found = f"{len(j)} entries" if isinstance(j, list) else type(j).__name__
        raise TraceError(file, "layer_kinds", f"expected an array of {num_layers} objects, one per "
                         f"model layer (model.num_layers), found {found}")
    out, slots_of = [], None  # slots_of: (layer, S) of the first ring layer
    for i, e in enumerate(j):
        at = f"layer_kinds[{i}]"
        if not isinstance(e, dict):
            raise TraceError(file, at, f"expected an object (one per model layer), found {e!r}")
        kind = e.get("kind")
        if kind not in KINDS:
            raise TraceError(file, f"{at}.kind", f"unknown layer kind {kind!r} (known: {', '.join(KINDS)})")
        window, chunk, slots = e.get("window"), e.get("chunk"), e.get("ring_slots")
        if kind in ("recurrent", "latent"):
            for name in ("window", "chunk", "ring_slots"):
                if e.get(name) is not None:
                    raise TraceError(file, f"{at}.{name}", f"a {kind} layer has no {name} (" +
                                     ("its cache is a recurrent state, not K/V rows)" if kind == "recurrent"
                                      else "it attends over every latent row it holds)"))
        span = {"sliding": ("window", window), "chunked": ("chunk", chunk)}.get(kind)
        if span is not None:
            name, value = span
            if value is None:
                raise TraceError(file, f"{at}.{name}", f"missing: a {kind} layer needs its {name} "
                                 "(a positive integer)")
            if not _is_int(value) or not 0 < value <= MAX_SLOTS:
                raise TraceError(file, f"{at}.{name}", f"expected an integer in [1, {MAX_SLOTS}], found {value!r}")
        if slots is not None:
            if kind == "full":
                raise TraceError(file, f"{at}.ring_slots", "a ring cache is for sliding and chunked "
                                 "layers only (this layer is full)")
            if not _is_int(slots) or not 0 < slots <= MAX_SLOTS:
                raise TraceError(file, f"{at}.ring_slots", f"expected an integer in [1, {MAX_SLOTS}], found {slots!r}")
            if slots_of is not None and slots != slots_of[1]:
                raise TraceError(file, f"{at}.ring_slots", f"ring of {slots} slots, but layer "
                                 f"{slots_of[0]}'s ring has {slots_of[1]}: every ring layer has the "
                                 "same number of slots")
            slots_of = slots_of or (i, slots)
        out.append({"kind": kind, "window": window if kind == "sliding" else 0,
                    "chunk": chunk if kind == "chunked" else 0, "ring_slots": slots or 0})
    return out


def ring_slots(kinds: Optional[List[Dict[str, Any]]]) -> int:
    """S, the slots of every ring layer (0: no ring layer)."""
    return next((k["ring_slots"] for k in kinds or [] if k["ring_slots"]), 0)


def ring_layers(kinds: Optional[List[Dict[str, Any]]], stored_layers: List[int]) -> List[int]:
    """The entries j of a step's per-layer data (model layer stored_layers[j]) that are ring
    layers, in layer order: the `Lr` axis of ring_positions."""
    if not kinds:
        return []
    return [j for j, l in enumerate(stored_layers) if kinds[l]["ring_slots"]]


def recurrent_layers(kinds: Optional[List[Dict[str, Any]]], stored_layers: List[int]) -> List[int]:
    """The entries j of a step's per-layer data (model layer stored_layers[j]) that are
    recurrent layers (no K/V records), in layer order."""
    if not kinds:
        return []
    return [j for j, l in enumerate(stored_layers) if kinds[l]["kind"] == "recurrent"]


def describe(kinds: Optional[List[Dict[str, Any]]]) -> str:
    """For `kvtrace info`: "sliding window 8 on layers 0-3, ring of 8 slots; full on layer 4",
    "recurrent state on layers 0, 2; full on layers 1, 3"."""
    if not kinds:
        return ""
    groups: List[tuple] = []  # ((kind, window, slots), [layers]) in order of first appearance
    for l, k in enumerate(kinds):
        key = (k["kind"], k["window"] or k.get("chunk", 0), k["ring_slots"])
        g = next((g for g in groups if g[0] == key), None)
        if g is None:
            groups.append((key, [l]))
        else:
            g[1].append(l)
    parts = []
    for (kind, span, slots), layers in groups:  # span: the window or the chunk
        what = {"sliding": f"sliding window {span}", "chunked": f"chunks of {span}",
                "recurrent": "recurrent state", "latent": "latent rows"}.get(kind, "full")
        parts.append(f"{what} on {_ranges(layers)}" + (f", ring of {slots} slots" if slots else ""))
    return "; ".join(parts)


def _ranges(layers: List[int]) -> str:
    runs: List[List[int]] = []
    for l in layers:
        if runs and l == runs[-1][1] + 1:
            runs[-1][1] = l
        else:
            runs.append([l, l])
    text = ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
    return ("layer " if len(layers) == 1 else "layers ") + text
