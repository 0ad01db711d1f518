"""Batched runs of the independent torch engine, for KV Scope's `batch_variance` row.

    record_pair(model_dir, out_path, prompts, max_new, dtype, batched, bug=None)

Every prompt is one request, all arriving at tick 0 and decoding in lockstep (one step each
per tick). Alone (`batched=False`) they share nothing but the clock; batched they form one
batch group computed with batch-invariant kernels: each request's forward runs on its own
rows, so it reproduces its solo run bit for bit. The bug `batch_variance:step=S,layer=L`
(layer -1: every layer) is a kernel that picks split-K by batch size: from step S, layer L's
q/k/v projections (gpt2: the fused c_attn) sum their reduction over the hidden dimension in
as many parts as the batch has requests, each part's product rounded to the compute dtype
(the split-K workspace holds the output dtype) before the parts are added.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

from record_run import write_trace
from torch_engine import DecodeEngine, RunLog
from torch_model import Model


def parse_batch_bug(spec: Optional[str]) -> Optional[Dict[str, int]]:
    """`batch_variance[:step=S,layer=L]` -> {"step": S, "layer": L} (defaults 1 and 0)."""
    if not spec:
        return None
    name, _, params = spec.partition(":")
    if name != "batch_variance":
        raise ValueError(f"unknown batched-run bug {name!r} (known: batch_variance)")
    out = {"step": 1, "layer": 0}
    for kv in filter(None, params.split(",")):
        k, _, v = kv.partition("=")
        if k not in out:
            raise ValueError(f"batch_variance: unknown parameter {k!r} (step, layer)")
        out[k] = int(v)
    return out


class SplitKModel(Model):
    """The model whose attention projections of some layers may take a split-K reduction.
    `begin(bug, batch)` arms it for one request's run; every forward is one step."""

    def __init__(self, directory: str, dtype: str = "float32"):
        super().__init__(directory, dtype)
        self._bug: Optional[Dict[str, int]] = None
        self._parts = 1
        self._step = 0
        self._active = False
        self._split: List[torch.Tensor] = []

    def begin(self, bug: Optional[Dict[str, int]], batch_size: int) -> None:
        if bug and not -1 <= bug["layer"] < self.cfg.num_layers:
            raise ValueError(f"batch_variance: layer {bug['layer']} is not a layer of this model")
        self._bug, self._parts, self._step = bug, batch_size, 0
        self._split = []  # the attention projections the bug splits, found once per run
        if bug:
            chosen = self.layers if bug["layer"] < 0 else [self.layers[bug["layer"]]]
            names = ("attn.c_attn.weight",) if self.cfg.model_type == "gpt2" else (
                "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")
            self._split = [w[n] for w in chosen for n in names]

    def forward(self, *args, **kwargs):
        self._active = bool(self._bug) and self._parts >= 2 and self._step >= self._bug["step"]
        try:
            return super().forward(*args, **kwargs)
        finally:
            self._step += 1

    def _splits(self, w: torch.Tensor) -> bool:
        return self._active and any(w is s for s in self._split)

    def _split_sum(self, x, w, b, conv1d: bool):
        n_in = w.shape[0] if conv1d else w.shape[1]
        out = None
        for p in range(self._parts):
            lo, hi = n_in * p // self._parts, n_in * (p + 1) // self._parts
            part = (self.prec.mm(torch.mm, x[:, lo:hi], w[lo:hi]) if conv1d
                    else self.prec.mm(F.linear, x[:, lo:hi], w[:, lo:hi]))
            out = part if out is None else self.prec.r(out + part)
        if b is not None:
            out = self.prec.r(out + b.to(out.dtype))
        return out

    def _linear(self, x, w, b=None):
        return self._split_sum(x, w, b, conv1d=False) if self._splits(w) else super()._linear(x, w, b)

    def _conv1d(self, x, w, b):
        return self._split_sum(x, w, b, conv1d=True) if self._splits(w) else super()._conv1d(x, w, b)


def run_pair(model: SplitKModel, prompts: List[List[int]], max_new: int, batched: bool,
             bug: Optional[str] = None) -> RunLog:
    """One RunLog of every prompt's greedy cached run, steps interleaved in lockstep."""
    parsed = parse_batch_bug(bug)
    if parsed and not batched:
        raise ValueError("batch_variance needs a batch (batched=True)")
    if len(prompts) < 2 and batched:
        raise ValueError("a batch needs two or more prompts")
    runs = []
    for prompt in prompts:
        model.begin(parsed, len(prompts) if batched else 1)
        runs.append(DecodeEngine(model).run_cached(list(prompt), max_new))
    model.begin(None, 1)
    out = RunLog("cached")
    out.weights_dirs = [model.directory]
    for i, run in enumerate(runs):
        req = dict(run.requests[0], id=i, batch_group=0 if batched else -1, arrival_tick=0)
        out.requests.append(req)
        for tick, s in enumerate(run.steps):  # lockstep: step k of every request at tick k
            s.request, s.slot, s.tick = i, i, tick
    for step in range(max(len(r.steps) for r in runs)):
        out.steps.extend(r.steps[step] for r in runs if step < len(r.steps))
    if parsed:
        out.injected.append({"bug": "batch_variance", **parsed, "batch_size": len(prompts)})
    return out


def record_pair(model_dir: str, out_path: str, prompts: List[List[int]], max_new: int,
                dtype: str = "float32", batched: bool = False, bug: Optional[str] = None) -> Dict[str, object]:
    """Runs the prompts alone or as one batch and writes the trace; returns a summary."""
    model = SplitKModel(model_dir, dtype)
    run = run_pair(model, prompts, max_new, batched, bug)
    write_trace(run, model, out_path)
    return {"out": out_path, "batched": batched, "injected": run.injected,
            "requests": {r["id"]: list(r["generated"]) for r in run.requests}}
