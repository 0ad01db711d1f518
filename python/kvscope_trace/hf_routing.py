"""The experts a transformers mixture of experts routes each token to, as the trace's
`experts` (docs/trace-format.md, "Expert choices"): a forward hook on every MoE block's router
keeps the choices of the model's latest forward.

transformers 5 routers (`gate` / `router` modules of Qwen3-MoE, Mixtral, GPT-OSS) return
(logits, scores, indices): the indices are what the block's experts use (4.x's DeepSeek
routers return (indices, weights): the integer tensor is taken wherever it is). transformers 4's
Mixtral and Qwen3-MoE gate is a Linear returning the logits; the block takes
topk(softmax(logits in float32), top_k), which the hook computes the same way. GPT-OSS in 4.x
returns (scores, indices); Llama 4's router returns (sigmoid scores, logits) and the block
takes the top_k logits. A block is a module with `experts` and a `gate` or `router`
module, under `layers.<i>.`."""

from __future__ import annotations

import re
from typing import Dict, Optional

import numpy as np

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


class ExpertTap:
    """Watches the routers of `model`; `take` hands out the latest forward's choices."""

    def __init__(self, model, num_layers: int):
        self.num_layers = num_layers
        self._latest: Dict[int, np.ndarray] = {}  # layer -> [N, K] of the latest forward
        self._hooks = []
        named = getattr(model, "named_modules", None)
        for name, module in (named() if callable(named) else ()):
            router = getattr(module, "router", None)
            if not hasattr(router, "register_forward_hook"):
                router = getattr(module, "gate", None)
            if not hasattr(module, "experts") or not hasattr(router, "register_forward_hook"):
                continue
            m = _LAYER.search(name + ".")
            if m is None:
                continue
            self._hooks.append(router.register_forward_hook(self._hook(int(m.group(1)), module)))

    @property
    def active(self) -> bool:
        return bool(self._hooks)

    def _hook(self, layer: int, block):
        import torch

        def hook(_module, _inputs, out):
            indices = [t for t in out if torch.is_tensor(t) and not t.is_floating_point()] \
                if isinstance(out, tuple) else []
            if indices:  # the router hands out the indices: last (5.x), first (4.x's DeepSeek)
                idx = indices[-1]
            elif isinstance(out, tuple) and len(out) == 2 and all(torch.is_tensor(t) and t.is_floating_point()
                                                                  for t in out):
                # Llama 4's router: (scores, logits); the block takes topk(logits, top_k)
                idx = torch.topk(out[1], int(block.top_k), dim=-1).indices
            else:  # a Linear gate (transformers 4): the block's softmax, then its top-k
                logits = out[0] if isinstance(out, tuple) else out
                idx = torch.topk(torch.softmax(logits.float(), dim=-1), int(block.top_k), dim=-1).indices
            self._latest[layer] = idx.detach().reshape(-1, idx.shape[-1]).to("cpu").numpy()
        return hook

    def take(self, count: int, row: int = 0, rows: int = 1) -> Optional[np.ndarray]:
        """Batch row `row` (of `rows`) of the latest forward: its last `count` entries as
        int32 [count, num_layers, K] (-1: a dense layer); None when nothing was routed."""
        if not self._latest:
            return None
        slots = max(a.shape[1] for a in self._latest.values())
        out = np.full((count, self.num_layers, slots), -1, np.int32)
        for layer, a in self._latest.items():
            per_row = a.shape[0] // rows
            mine = a[row * per_row:(row + 1) * per_row]
            out[:, layer, :a.shape[1]] = mine[per_row - count:]
        return out

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
