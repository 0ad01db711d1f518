"""DeepSeek V2 / V3 for the independent PyTorch engine: multi-head latent attention and
DeepSeek's mixture of experts, written from transformers 5's modeling_deepseek_v2.py and
modeling_deepseek_v3.py (it shares no code with KV Scope's C++ core).

The cache holds what transformers 5 caches: per token one latent row c_kv (kv_a_proj_with_mqa's
first kv_lora_rank features after kv_a_layernorm) as the key, [1, 1, t, kv_lora_rank], and one
roped key part k_pe shared by every head as the value, [1, 1, t, qk_rope_head_dim]. Every head's
key nope part and value are decompressed from the held latent rows by kv_b_proj at each forward
(the materialised form). `form` switches a forward's attention to the absorbed form serving
engines decode with: kv_b_proj's key rows folded into the queries (scores over the latent rows
directly) and its value rows applied to the latent context; `"absorbed"` reads kv_b_proj per head
as the checkpoint stores it ([nope key rows | v value rows] per head), `"halves"` reads every
head's key rows, then every head's value rows (the mla_absorb bug). `records = "heads"` (the
engine option mla_heads) caches what transformers 4.x caches instead: each head's decompressed key
(nope part, then the roped part) and value, decompressed once when the token is fed.

RoPE over the roped part: default or yarn (transformers' _compute_yarn_parameters: inverse
frequencies and the attention factor cos and sin carry); scores scaled by qk_head_dim^-0.5 times
yarn's mscale(factor, mscale_all_dim)^2. V2 turns (even, odd) feature pairs as complex numbers and
leaves them in place; V3 with rope_interleave turns the pairs and writes them de-interleaved, else
half-split pairs. Experts: V2 by softmax probability (greedy, or group_limited_greedy: groups
ranked by their best), weights x routed_scaling_factor; V3 by sigmoid score plus
e_score_correction_bias within the groups whose two best sum highest, weights the plain scores
(renormalised with norm_topk_prob) x routed_scaling_factor; shared experts beside them; dense
MLP on the first first_k_dense_replace layers.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_numpy  # noqa: E402
from torch_model import KVCache, Model, Precision, read_config  # noqa: E402

LATENT_TYPES = ("deepseek_v2", "deepseek_v3")
FORMS = ("materialised", "absorbed", "halves")


class LatentConfig:
    """The parameters of a DeepSeek V2 / V3 config.json (ValueError naming the field)."""

    def __init__(self, directory: str):
        c, path = read_config(directory)
        self.directory, self.model_type = directory, c.get("model_type")
        if self.model_type not in LATENT_TYPES:
            raise ValueError(f"{path}: model_type {self.model_type!r} is not {' or '.join(LATENT_TYPES)}")
        self.num_layers, self.num_heads = c["num_hidden_layers"], c["num_attention_heads"]
        self.num_kv_heads = self.num_heads  # every head decompressed (Model._attend's grouping)
        self.hidden, self.vocab_size = c["hidden_size"], c["vocab_size"]
        self.intermediate = c["intermediate_size"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.max_positions = c.get("max_position_embeddings", 2048)
        self.tie = c.get("tie_word_embeddings", False)
        self.q_lora = c.get("q_lora_rank")
        self.kv_lora, self.nope = c["kv_lora_rank"], c["qk_nope_head_dim"]
        self.rope_dim, self.v_dim = c["qk_rope_head_dim"], c["v_head_dim"]
        self.head_dim = self.kv_lora  # the cache's key width (the trace's head_dim)
        if c.get("hidden_act", "silu") != "silu":
            raise ValueError(f"{path}: hidden_act {c.get('hidden_act')!r} not supported")
        if self.model_type == "deepseek_v2":
            self.pairs = "in_place"
        else:
            self.pairs = "deinterleaved" if c.get("rope_interleave", True) else "half_split"
        self.rope = self._rope(c, path)
        self.windows: List[Optional[int]] = [None] * self.num_layers
        self.experts, self.top_k = c.get("n_routed_experts", 0), c.get("num_experts_per_tok")
        self.groups, self.top_groups = c.get("n_group") or 1, c.get("topk_group") or 1
        self.method = c.get("topk_method", "greedy") if self.model_type == "deepseek_v2" else "sigmoid_groups"
        if self.method not in ("greedy", "group_limited_greedy", "sigmoid_groups"):
            raise ValueError(f"{path}: topk_method {self.method!r} not supported")
        self.norm_topk = self.model_type == "deepseek_v3" and c.get("norm_topk_prob", True)
        self.routed_scale = c.get("routed_scaling_factor", 1.0)
        self.expert_width = c["moe_intermediate_size"]
        self.shared = c.get("n_shared_experts") or 0
        self.dense_layers = c.get("first_k_dense_replace", 0)

    @staticmethod
    def _rope(c: dict, path: str) -> Dict[str, object]:
        p = c.get("rope_parameters") or dict(c.get("rope_scaling") or {}, rope_theta=c.get("rope_theta", 10000.0))
        kind = p.get("rope_type", p.get("type", "default"))
        if kind not in ("default", "yarn"):
            raise ValueError(f"{path}: rope_parameters.rope_type {kind!r} not supported (default, yarn)")
        return {"type": kind, "theta": p["rope_theta"], "factor": p.get("factor"),
                "original": p.get("original_max_position_embeddings"), "attention_factor": p.get("attention_factor"),
                "mscale": p.get("mscale"), "mscale_all_dim": p.get("mscale_all_dim"),
                "beta_fast": p.get("beta_fast") or 32, "beta_slow": p.get("beta_slow") or 1,
                "truncate": p.get("truncate", True)}

    def shape_key(self) -> tuple:
        return (self.model_type, self.num_layers, self.num_heads, self.kv_lora, self.rope_dim, self.hidden,
                self.vocab_size)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


class LatentModel(Model):
    """A DeepSeek V2 / V3 forward over a KVCache that holds latent rows and roped key parts."""

    def __init__(self, directory: str, dtype: str = "float32"):
        self.cfg = LatentConfig(directory)
        self.prec = Precision(dtype)
        self.form = "materialised"  # the attention form of the next forward (FORMS)
        self.form_layers: Optional[set] = None  # the layers `form` applies to (None: all)
        self.records = "latent"  # what the cache holds: latent rows, or "heads" (decompressed)
        self.load_weights(directory)
        self.inv_freq, self.attention_factor = self._rope_frequencies()
        scale = (self.cfg.nope + self.cfg.rope_dim) ** -0.5
        rope = self.cfg.rope
        if rope["type"] != "default" and rope["mscale_all_dim"]:
            scale *= yarn_mscale(rope["factor"], rope["mscale_all_dim"]) ** 2
        self.scale = scale

    def load_weights(self, directory: str) -> None:
        cfg = LatentConfig(directory)
        if cfg.shape_key() != self.cfg.shape_key():
            raise ValueError(f"{directory}: config does not match the loaded model's shape")
        raw = st_numpy.load_checkpoint(directory)
        self.directory = directory

        def get(name: str, optional: bool = False):
            if name not in raw:
                if optional:
                    return None
                raise ValueError(f"{directory}: missing tensor '{name}' (needed by {cfg.model_type})")
            return self.prec.param(raw[name])
        self.embed, self.norm = get("model.embed_tokens.weight"), get("model.norm.weight")
        head = get("lm_head.weight", optional=cfg.tie)
        self.lm_head = self.embed if head is None else head
        self.layers = []
        for l in range(cfg.num_layers):
            b = f"model.layers.{l}."
            names = ["input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.o_proj.weight",
                     "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
                     "self_attn.kv_b_proj.weight"]
            names += ["self_attn.q_proj.weight"] if cfg.q_lora is None else [
                "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight"]
            if l < cfg.dense_layers or not cfg.experts:
                names += [f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")]
            else:
                names += ["mlp.gate.weight"] + [f"mlp.experts.{e}.{n}_proj.weight" for e in range(cfg.experts)
                                                for n in ("gate", "up", "down")]
                if cfg.shared:
                    names += [f"mlp.shared_experts.{n}_proj.weight" for n in ("gate", "up", "down")]
            w = {n: get(b + n) for n in names}
            if cfg.method == "sigmoid_groups" and l >= cfg.dense_layers:
                w["mlp.gate.e_score_correction_bias"] = get(b + "mlp.gate.e_score_correction_bias", optional=True)
            self.layers.append(w)

    # ---- RoPE
    def _rope_frequencies(self):
        """Inverse frequencies [rope/2] and the factor cos and sin carry."""
        rope, d = self.cfg.rope, self.cfg.rope_dim
        pos_freqs = rope["theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)
        if rope["type"] == "default":
            return 1.0 / pos_freqs, 1.0
        factor = rope["factor"] or self.cfg.max_positions / rope["original"]
        attention = rope["attention_factor"]
        if attention is None:
            attention = (yarn_mscale(factor, rope["mscale"]) / yarn_mscale(factor, rope["mscale_all_dim"])
                         if rope["mscale"] and rope["mscale_all_dim"] else yarn_mscale(factor))

        def correction(rotations):
            return d * math.log(rope["original"] / (rotations * 2 * math.pi)) / (2 * math.log(rope["theta"]))
        low, high = correction(rope["beta_fast"]), correction(rope["beta_slow"])
        if rope["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
        return inv, float(attention)

    def _turn(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The roped features x [1, h, n, rope] at the positions, in the model's pairing."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [n, rope/2]
        cos, sin = freqs.cos() * self.attention_factor, freqs.sin() * self.attention_factor
        xf = x.to(torch.float32)
        if self.cfg.pairs == "in_place":  # (2i, 2i+1) as a complex number, left in place
            even, odd = xf[..., 0::2], xf[..., 1::2]
            out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
            return out.to(x.dtype)
        if self.cfg.pairs == "deinterleaved":  # the pairs' evens first, then their odds
            xf = torch.cat([xf[..., 0::2], xf[..., 1::2]], dim=-1)
        c, s = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
        half = xf.shape[-1] // 2
        rot = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
        return (xf * c + rot * s).to(x.dtype)

    # ---- blocks
    def _norm(self, x, w, eps):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return self.prec.r(w * self.prec.r(h.to(x.dtype)))

    def _attention(self, l: int, w: dict, x, pos, cache: KVCache, past: int):
        cfg, n, nh = self.cfg, x.shape[0], self.cfg.num_heads
        if cfg.q_lora is None:
            q = self._linear(x, w["self_attn.q_proj.weight"])
        else:
            q = self._linear(self._norm(self._linear(x, w["self_attn.q_a_proj.weight"]),
                                        w["self_attn.q_a_layernorm.weight"], 1e-6), w["self_attn.q_b_proj.weight"])
        q = q.view(n, nh, cfg.nope + cfg.rope_dim).transpose(0, 1).unsqueeze(0)  # [1, nh, n, qk]
        q_nope, q_pe = q[..., :cfg.nope], self._turn(q[..., cfg.nope:], pos)
        compressed = self._linear(x, w["self_attn.kv_a_proj_with_mqa.weight"])
        latent = self._norm(compressed[:, :cfg.kv_lora], w["self_attn.kv_a_layernorm.weight"], 1e-6)
        k_pe = self._turn(compressed[:, cfg.kv_lora:].view(1, 1, n, cfg.rope_dim), pos)
        kv_b = w["self_attn.kv_b_proj.weight"]  # [nh (nope + v), R]
        if self.records == "heads":  # the fed tokens' heads decompressed once, cached as K/V
            fed = self._linear(latent, kv_b).view(n, nh, cfg.nope + cfg.v_dim).transpose(0, 1)  # [nh, n, nope + v]
            keys, values = cache.update(l, torch.cat([fed[..., :cfg.nope], k_pe[0].expand(nh, n, cfg.rope_dim)],
                                                     dim=-1).unsqueeze(0), fed[..., cfg.nope:].unsqueeze(0))
            ctx = self._attend(torch.cat([q_nope, q_pe], dim=-1), keys, values, past, self.scale)
            return self._linear(self._merge(ctx), w["self_attn.o_proj.weight"])
        c_all, pe_all = cache.update(l, latent.view(1, 1, n, cfg.kv_lora), k_pe)  # [1, 1, t, R], [1, 1, t, rope]
        t = c_all.shape[2]
        form = self.form if self.form_layers is None or l in self.form_layers else "materialised"
        if form == "materialised":
            expanded = self._linear(c_all[0, 0], kv_b).view(t, nh, cfg.nope + cfg.v_dim).transpose(0, 1)
            keys = torch.cat([expanded[..., :cfg.nope], pe_all[0].expand(nh, t, cfg.rope_dim)], dim=-1).unsqueeze(0)
            values = expanded[..., cfg.nope:].unsqueeze(0)
            ctx = self._attend(torch.cat([q_nope, q_pe], dim=-1), keys, values, past, self.scale)
        else:
            if form == "absorbed":  # per head: [nope key rows | v value rows]
                per_head = kv_b.view(nh, cfg.nope + cfg.v_dim, cfg.kv_lora)
                key_rows, value_rows = per_head[:, :cfg.nope], per_head[:, cfg.nope:]
            else:  # halves: every head's key rows, then every head's value rows
                key_rows = kv_b[:nh * cfg.nope].view(nh, cfg.nope, cfg.kv_lora)
                value_rows = kv_b[nh * cfg.nope:].view(nh, cfg.v_dim, cfg.kv_lora)
            queries = torch.cat([self.prec.mm(torch.matmul, q_nope, key_rows.unsqueeze(0)), q_pe], dim=-1)
            keys = torch.cat([c_all, pe_all], dim=-1).expand(1, nh, t, cfg.kv_lora + cfg.rope_dim)
            latent_ctx = self._attend(queries, keys, c_all.expand(1, nh, t, cfg.kv_lora), past, self.scale)
            ctx = self.prec.mm(torch.matmul, latent_ctx, value_rows.transpose(1, 2).unsqueeze(0))
        return self._linear(self._merge(ctx), w["self_attn.o_proj.weight"])

    def _gated(self, x, gate, up, down):
        r = self.prec.r
        return self._linear(r(r(F.silu(self._linear(x, gate))) * self._linear(x, up)), down)

    def _route(self, w: dict, x):
        """The experts [n, k] and their weights [n, k] of DeepSeek's router."""
        cfg = self.cfg
        logits = F.linear(x.to(torch.float32), w["mlp.gate.weight"].to(torch.float32))
        per = cfg.experts // cfg.groups
        if cfg.method == "sigmoid_groups":
            scores = logits.sigmoid()
            bias = w.get("mlp.gate.e_score_correction_bias")
            choice = scores + (bias.to(torch.float32) if bias is not None else 0)
            group_scores = choice.view(-1, cfg.groups, per).topk(2, dim=-1)[0].sum(-1)
        else:
            scores = logits.softmax(dim=-1)
            choice = scores
            group_scores = scores.view(-1, cfg.groups, per).max(dim=-1).values
        if cfg.method != "greedy":
            kept = group_scores.topk(cfg.top_groups, dim=-1)[1]
            mask = torch.zeros_like(group_scores).scatter_(1, kept, 1).bool()
            choice = choice.masked_fill(~mask.repeat_interleave(per, dim=1), 0.0)
        experts = choice.topk(cfg.top_k, dim=-1)[1]
        weights = scores.gather(1, experts)
        if cfg.norm_topk:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return experts, weights * cfg.routed_scale

    def _mlp(self, l: int, w: dict, x):
        if "mlp.gate_proj.weight" in w:
            return self._gated(x, w["mlp.gate_proj.weight"], w["mlp.up_proj.weight"], w["mlp.down_proj.weight"])
        experts, weights = self._route(w, x)
        out = torch.zeros(x.shape, dtype=torch.float32)
        for e in range(self.cfg.experts):
            rows, slot = (experts == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            b = f"mlp.experts.{e}."
            y = self._gated(x[rows], w[b + "gate_proj.weight"], w[b + "up_proj.weight"], w[b + "down_proj.weight"])
            out.index_add_(0, rows, y.to(torch.float32) * weights[rows, slot, None])
        out = out.to(x.dtype)
        if self.cfg.shared:
            out = out + self._gated(x, w["mlp.shared_experts.gate_proj.weight"], w["mlp.shared_experts.up_proj.weight"],
                                    w["mlp.shared_experts.down_proj.weight"])
        return out

    @torch.no_grad()
    def forward(self, ids: List[int], positions: List[int], cache: KVCache,
                unscaled_rope_layers: Optional[set] = None,
                layer_positions: Optional[Dict[int, List[int]]] = None) -> torch.Tensor:
        """Float32 logits [n, V] of the fed tokens at the position ids over the cache. The RoPE
        bugs of the Llama path (unscaled_rope_layers, layer_positions) are not modelled here."""
        if unscaled_rope_layers or layer_positions:
            raise ValueError(f"{self.cfg.model_type}: the independent engine's RoPE bugs are for Llama-family models")
        cfg = self.cfg
        if len(ids) != len(positions) or not ids or any(not 0 <= t < cfg.vocab_size for t in ids):
            raise ValueError(f"bad fed tokens {ids} at {positions}")
        pos = torch.tensor(positions, dtype=torch.int64)
        past = cache.get_seq_length()
        h = F.embedding(torch.tensor(ids, dtype=torch.int64), self.embed)
        for l, w in enumerate(self.layers):
            x = self._norm(h, w["input_layernorm.weight"], cfg.eps)
            h = self.prec.r(h + self._attention(l, w, x, pos, cache, past))
            x = self._norm(h, w["post_attention_layernorm.weight"], cfg.eps)
            h = self.prec.r(h + self._mlp(l, w, x))
        h = self._norm(h, self.norm, cfg.eps)
        return self.prec.mm(F.linear, h, self.lm_head).to(torch.float32)

    def _merge(self, x):
        return x[0].transpose(0, 1).reshape(x.shape[2], -1)

    def model_info(self, fingerprint: str = "", stored_dtype: str = "") -> Dict[str, object]:
        """The trace's model block: one latent "head" of kv_lora_rank keys, roped parts as values;
        with records "heads", every head's decompressed key and value (model.latent_records)."""
        c = self.cfg
        if self.records == "heads":
            shape = {"num_kv_heads": c.num_heads, "head_dim": c.nope + c.rope_dim, "value_head_dim": c.v_dim,
                     "latent_records": "heads"}
        else:
            shape = {"num_kv_heads": 1, "head_dim": c.kv_lora, "value_head_dim": c.rope_dim}
        info = {"num_layers": c.num_layers, "num_heads": c.num_heads, **shape, "vocab_size": c.vocab_size,
                "max_positions": c.max_positions, "architecture": c.model_type,
                "directory": os.path.abspath(c.directory), "fingerprint": fingerprint,
                "stored_dtype": stored_dtype, "compute_dtype": self.prec.name}
        rope = c.rope
        if rope["type"] == "yarn":
            info["rope_parameters"] = {k: v for k, v in (
                ("rope_type", "yarn"), ("rope_theta", rope["theta"]), ("factor", rope["factor"]),
                ("original_max_position_embeddings", rope["original"]), ("attention_factor", rope["attention_factor"]),
                ("mscale", rope["mscale"]), ("mscale_all_dim", rope["mscale_all_dim"]),
                ("beta_fast", rope["beta_fast"]), ("beta_slow", rope["beta_slow"])) if v is not None}
        return info


def load_model(directory: str, dtype: str = "float32") -> Model:
    """The independent engine's model of the checkpoint: LatentModel for DeepSeek, else Model."""
    kind = read_config(directory)[0].get("model_type")
    return LatentModel(directory, dtype) if kind in LATENT_TYPES else Model(directory, dtype)


# ----------------------------------------------------------------------------- the engine's latent bugs

def check_latent_bugs(bugs: Dict[str, dict], model: Model) -> None:
    """mla_absorbed (not a bug: absorbed decode), mla_absorb (absorbed decode reading kv_b_proj
    by halves) and mla_heads (not a bug: decompressed heads cached) need a LatentModel; the first
    two a decode step (>= 1) and a layer of the model, and not both; mla_heads neither (an
    absorbed decode attends over latent rows). Sets the model's records."""
    if isinstance(model, LatentModel):  # a model reused by another engine starts from latent rows
        model.records = "heads" if "mla_heads" in bugs else "latent"
    named = [n for n in ("mla_absorbed", "mla_absorb", "mla_heads") if n in bugs]
    if not named:
        return
    if not isinstance(model, LatentModel):
        raise ValueError(f"{named[0]} needs a checkpoint with multi-head latent attention ({', '.join(LATENT_TYPES)})")
    if "mla_heads" in bugs and len(named) > 1:
        raise ValueError(f"{named[0]} decodes over latent rows: mla_heads caches decompressed heads instead")
    named = [n for n in named if n != "mla_heads"]
    if not named:
        return
    if len(named) > 1:
        raise ValueError("mla_absorb brings its own absorbed decode: give it without mla_absorbed")
    b = bugs.get("mla_absorb")
    if b and (b["step"] < 1 or not -1 <= b["layer"] < model.cfg.num_layers):
        raise ValueError(f"mla_absorb: step {b['step']} (>= 1: a decode step) / layer {b['layer']} out of range")


def set_latent_form(model: Model, bugs: Dict[str, dict], step: int) -> None:
    """The attention form of the model's next forward, for decode step `step` (-1: a prefill
    forward, always materialised)."""
    if not isinstance(model, LatentModel):
        return
    model.form, model.form_layers = "materialised", None
    b = bugs.get("mla_absorb")
    if b and step >= b["step"]:
        model.form, model.form_layers = "halves", (None if b["layer"] < 0 else {b["layer"]})
    elif "mla_absorbed" in bugs and step >= 1:
        model.form = "absorbed"


def latent_kinds(model: Model) -> Optional[List[Dict[str, object]]]:
    """The trace's layer_kinds of a latent model (every layer "latent"); None otherwise."""
    return [{"kind": "latent"}] * model.cfg.num_layers if isinstance(model, LatentModel) else None
