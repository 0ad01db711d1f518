"""A ring-buffer cache for sliding-window layers, for the independent engine (written from
what vLLM's and llama.cpp's sliding-window caches do, not from KV Scope's code): a sliding
layer of window W keeps S = W physical slots and entry c (the c-th record the layer was
given) lives in slot c % S, so the cache never grows past S; full layers keep the growing
cache of torch_model.KVCache.

update() returns, for the attention, the slots held before the step (slot order) followed by
the step's new records, and key_index() gives each of them its cache index, so the model's
sliding mask (torch_model.Model._attend) picks the same keys the growing cache would have
offered; only then are the new records written into their slots (a prefill longer than S
keeps its last S). Every ring layer keeps a slot -> cache index map; record() turns it into
the trace's position ids.

The bug `wrong_slot` (the engine's `window_wrap:layer=L`): once a layer's cache has wrapped
(cache index c >= S), entry c goes to slot (c - 1) % S instead of c % S. Writing entry S
overwrites slot S - 1, whose entry the next query still needs; the map records what the
slots really hold.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

import numpy as np
import torch

from torch_model import KVCache


class RingWindowCache(KVCache):
    """`windows`: per layer its sliding window (None: a full layer). `wrong_slot`: the layers
    whose writes past the wrap go one slot too early (the window_wrap bug)."""

    def __init__(self, windows: List[Optional[int]], wrong_slot: Optional[Set[int]] = None):
        super().__init__(len(windows))
        if not any(windows):
            raise ValueError("a ring cache needs a sliding-window layer (the model has none)")
        self.slots = [w or 0 for w in windows]  # S per layer, 0: full
        self.wrong_slot = set(wrong_slot or ())
        if any(not 0 <= l < len(windows) or not self.slots[l] for l in self.wrong_slot):
            raise ValueError(f"window_wrap: layers {sorted(self.wrong_slot)} must be sliding layers "
                             f"(sliding: {[l for l, s in enumerate(self.slots) if s]})")
        self.reset()

    def reset(self) -> None:
        super().reset()
        L = self.num_layers
        self.fed = [0] * L                  # entries given to each layer so far
        self.held: List[List[int]] = [[-1] * s for s in self.slots]  # slot -> cache index
        self.last_index: List[Optional[torch.Tensor]] = [None] * L
        self.new_keys: List[Optional[torch.Tensor]] = [None] * L
        self.new_values: List[Optional[torch.Tensor]] = [None] * L
        self.positions: List[int] = []      # the position id of every cache index, from record()
        self.wrapped: Dict[int, int] = {}   # layer -> the cache index whose write went wrong first

    def is_ring(self, layer_idx: int) -> bool:
        return self.slots[layer_idx] > 0

    def slot_of(self, layer_idx: int, c: int) -> int:
        S = self.slots[layer_idx]
        if layer_idx in self.wrong_slot and c >= S:
            self.wrapped.setdefault(layer_idx, c)
            return (c - 1) % S
        return c % S

    def update(self, layer_idx, k_new, v_new):
        start, n = self.fed[layer_idx], int(k_new.shape[2])
        self.fed[layer_idx] += n
        self.new_keys[layer_idx], self.new_values[layer_idx] = k_new, v_new
        if not self.is_ring(layer_idx):
            return super().update(layer_idx, k_new, v_new)
        S, held = self.slots[layer_idx], self.held[layer_idx]
        if self.keys[layer_idx] is None:
            shape = (k_new.shape[0], k_new.shape[1], S, k_new.shape[3])
            self.keys[layer_idx] = torch.zeros(shape, dtype=k_new.dtype)
            self.values[layer_idx] = torch.zeros(shape, dtype=v_new.dtype)
        occupied = [s for s in range(S) if held[s] >= 0]
        keys = torch.cat([self.keys[layer_idx][:, :, occupied], k_new], dim=2)
        values = torch.cat([self.values[layer_idx][:, :, occupied], v_new], dim=2)
        self.last_index[layer_idx] = torch.tensor([held[s] for s in occupied] + list(range(start, start + n)),
                                                  dtype=torch.int64)
        for i in range(n):
            c = start + i
            s = self.slot_of(layer_idx, c)
            self.keys[layer_idx][:, :, s] = k_new[:, :, i]
            self.values[layer_idx][:, :, s] = v_new[:, :, i]
            held[s] = c
        return keys, values

    def key_index(self, layer_idx: int) -> Optional[torch.Tensor]:
        return self.last_index[layer_idx] if self.is_ring(layer_idx) else None

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.fed[layer_idx]

    def crop(self, max_length: int) -> None:
        raise ValueError("a ring cache cannot drop rejected drafts (speculative decoding needs a growing cache)")

    def occupied(self, layer_idx: int) -> int:
        """The layer's cache length in the trace: occupied slots of a ring, else entries."""
        if self.is_ring(layer_idx):
            return sum(1 for c in self.held[layer_idx] if c >= 0)
        return self.fed[layer_idx]

    def contents(self, layer_idx: int):
        """Float32 [h_kv, t, d] keys and values as the layer holds them: a ring's occupied
        slots 0 .. occupied-1 in slot order (what its checksum covers), else the cache."""
        t = self.occupied(layer_idx)
        def one(x):
            return x[0, :, :t].detach().to(torch.float32).clone().numpy()
        return one(self.keys[layer_idx]), one(self.values[layer_idx])

    def record(self, positions: List[int]) -> Dict[str, object]:
        """What the trace records of the step that fed `positions` (call once per step, after
        it): per layer the new records and the cache length, the ring layers' slot maps as
        position ids (-1 empty), and per layer the cache contents for its checksums."""
        self.positions.extend(int(p) for p in positions)
        def f32(x):
            return x[0].detach().to(torch.float32).clone().numpy()
        contents = [self.contents(l) for l in range(self.num_layers)]
        return {"keys": [f32(k) for k in self.new_keys], "values": [f32(v) for v in self.new_values],
                "cache_lengths": [self.occupied(l) for l in range(self.num_layers)],
                "ring_positions": [np.array([self.positions[c] if c >= 0 else -1 for c in self.held[l]],
                                            dtype=np.int32)
                                   for l in range(self.num_layers) if self.is_ring(l)],
                "contents_k": [c[0] for c in contents], "contents_v": [c[1] for c in contents]}


def layer_kinds(windows: List[Optional[int]], ring: bool) -> Optional[List[Dict[str, object]]]:
    """The trace's layer_kinds for per-layer windows (None: full), every sliding layer a ring
    of S = W slots when `ring`; None for a model without a sliding layer."""
    if not any(windows):
        return None
    return [{"kind": "full"} if not w else
            {"kind": "sliding", "window": w, **({"ring_slots": w} if ring else {})} for w in windows]
