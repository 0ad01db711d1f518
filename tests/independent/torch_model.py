"""The model of the independent PyTorch decode engine (torch_engine.py): HF-format GPT-2
and Llama-family checkpoints (DeepSeek V2 / V3, multi-head latent attention: torch_mla.py).

It shares no code with KV Scope's C++ core: weights come from st_numpy.py, the model is
written here from the transformers definitions (GPT-2: learned positions, LayerNorm,
Conv1D weights [in, out], fused c_attn, gelu_new, tied head; Llama / Mistral / Qwen2:
RMSNorm, RoPE with default, linear or llama3 scaling, grouped-query attention, SwiGLU,
Qwen2 q/k/v biases). The cache is a
transformers-style object (`update(layer_idx, k, v) -> (k_all, v_all)`,
`get_seq_length()`, keys stored after RoPE), and the attention mask follows transformers'
`cache_position` rule: query i of a step may see cache entry j when
`j <= past_len + i`, with `past_len` the cache length before the step. Sliding-window
layers (Mistral's `sliding_window` on every layer, Qwen2's above `max_window_layers` when
`use_sliding_window`, or `layer_types`) also need `j > past_len + i - W`, transformers'
sliding mask on cache indices; their attention reads the keys some query of the step can
see, in cache-index order, so a cache that holds them in another order (ring_cache.py)
computes the same thing.

Compute dtypes:
  float32   plain float32.
  bfloat16  weights and activations are torch.bfloat16; element-wise ops run in bf16.
            Matmuls take the bf16 operands, accumulate in float32 and round the output
            to bf16 once (what a GPU bf16 GEMM returns; torch 1.13's own CPU bf16 matmul
            accumulates a one-row batched matmul in bf16, so a decode step would be
            noisier than the prefill for a reason no real engine has). RMSNorm and the
            attention softmax compute in float32 and cast back, as transformers does.
  float16   emulated (torch 1.13 has no CPU fp16 matmul): weights are float16-rounded
            float32 and every op's output is rounded to float16 and back, which is what a
            GPU fp16 kernel with float32 accumulation returns.

The decode loop, the bug patches and the token chooser are in torch_engine.py.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Dict, List, Optional, Set, Tuple

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_numpy  # noqa: E402

LLAMA_TYPES = ("llama", "mistral", "qwen2")
DTYPES = ("float32", "bfloat16", "float16")


# ----------------------------------------------------------------------------- config

def read_config(directory: str) -> Tuple[dict, str]:
    """config.json of a checkpoint directory and its path (ValueError naming the file)."""
    path = os.path.join(directory, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), path
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read config ({e})") from None


class ModelConfig:
    """The architecture parameters read from config.json (GPT-2 or Llama family)."""

    def __init__(self, directory: str):
        c, path = read_config(directory)
        self.directory = directory
        self.model_type = c.get("model_type")
        if self.model_type == "gpt2":
            self.num_layers, self.num_heads = c["n_layer"], c["n_head"]
            self.hidden = c["n_embd"]
            self.num_kv_heads = self.num_heads
            self.head_dim = self.hidden // self.num_heads
            self.max_positions = c.get("n_positions", 1024)
            self.eps = c.get("layer_norm_epsilon", 1e-5)
            self.intermediate = c.get("n_inner") or 4 * self.hidden
            self.activation = c.get("activation_function", "gelu_new")
            if self.activation not in ("gelu_new", "gelu_pytorch_tanh"):
                raise ValueError(f"{path}: activation_function {self.activation!r} not supported")
            self.scale_attn = c.get("scale_attn_weights", True)
            self.scale_by_layer = c.get("scale_attn_by_inverse_layer_idx", False)
            self.tie = c.get("tie_word_embeddings", True)
            self.windows: List[Optional[int]] = [None] * self.num_layers
        elif self.model_type in LLAMA_TYPES:
            self.num_layers = c["num_hidden_layers"]
            self.num_heads = c["num_attention_heads"]
            self.num_kv_heads = c.get("num_key_value_heads") or self.num_heads
            self.hidden = c["hidden_size"]
            self.head_dim = c.get("head_dim") or self.hidden // self.num_heads
            self.max_positions = c.get("max_position_embeddings", 2048)
            self.eps = c.get("rms_norm_eps", 1e-6)
            self.intermediate = c["intermediate_size"]
            if c.get("hidden_act", "silu") != "silu":
                raise ValueError(f"{path}: hidden_act {c.get('hidden_act')!r} not supported")
            self.tie = c.get("tie_word_embeddings", False)
            self.rope = self._rope(c, path)
            self.windows = self._windows(c, path)
        else:
            raise ValueError(f"{path}: model_type {self.model_type!r} not supported "
                             f"(gpt2, {', '.join(LLAMA_TYPES)})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{path}: {self.num_heads} heads do not group into {self.num_kv_heads} KV heads")
        self.vocab_size = c["vocab_size"]

    @staticmethod
    def _rope(c: dict, path: str) -> Dict[str, object]:
        """The RoPE parameters from the top level (transformers 4: rope_theta, rope_scaling)
        or from rope_parameters (transformers 5): theta, type (default, linear, llama3),
        factor and llama3's low/high frequency factors and original context."""
        params = c.get("rope_parameters") or {}
        scaling = c.get("rope_scaling") or {}
        src = params if params else scaling
        theta = params.get("rope_theta", c.get("rope_theta", 10000.0))
        kind = src.get("rope_type") or src.get("type") or "default"
        rope = {"theta": float(theta), "type": kind, "factor": 1.0}
        if kind == "default":
            return rope
        if kind not in ("linear", "llama3"):
            raise ValueError(f"{path}: rope type {kind!r} not supported (default, linear, llama3)")
        rope["factor"] = float(src.get("factor", 1.0))
        if kind == "llama3":
            try:
                rope["low"] = float(src["low_freq_factor"])
                rope["high"] = float(src["high_freq_factor"])
                rope["original"] = int(src["original_max_position_embeddings"])
            except KeyError as e:
                raise ValueError(f"{path}: llama3 rope scaling needs {e.args[0]}") from None
        return rope

    def _windows(self, c: dict, path: str) -> List[Optional[int]]:
        """The sliding window of each layer (None: full attention), as transformers reads the
        config: Mistral slides every layer when sliding_window is set; Qwen2 only with
        use_sliding_window, the layers i >= max_window_layers; a layer_types list
        ("sliding_attention" / "full_attention") decides per layer when present."""
        window, L = c.get("sliding_window"), self.num_layers
        if self.model_type == "qwen2" and not c.get("use_sliding_window", False):
            window = None
        if window is None:
            return [None] * L
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            raise ValueError(f"{path}: sliding_window {window!r} is not a positive integer")
        types = c.get("layer_types")
        if types is not None:
            if not isinstance(types, list) or len(types) != L or \
                    any(t not in ("sliding_attention", "full_attention") for t in types):
                raise ValueError(f"{path}: layer_types needs {L} entries, each sliding_attention or full_attention")
            return [window if t == "sliding_attention" else None for t in types]
        if self.model_type == "mistral":
            return [window] * L
        if self.model_type == "qwen2":
            first = c.get("max_window_layers", L)
            return [window if i >= first else None for i in range(L)]
        return [None] * L  # llama: sliding only through layer_types

    def shape_key(self) -> tuple:
        """What two checkpoints must share for one to replace the other's weights."""
        return (self.model_type, self.num_layers, self.num_heads, self.num_kv_heads,
                self.head_dim, self.hidden, self.intermediate, self.vocab_size)


# ----------------------------------------------------------------------------- precision

class Precision:
    """How parameters are held and how op outputs are rounded for a compute dtype."""

    def __init__(self, name: str):
        if name not in DTYPES:
            raise ValueError(f"compute dtype {name!r} not supported ({', '.join(DTYPES)})")
        self.name = name
        self.dtype = torch.bfloat16 if name == "bfloat16" else torch.float32

    def param(self, array: np.ndarray) -> torch.Tensor:
        """A weight array as the compute dtype holds it."""
        t = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
        if self.name == "float16":
            return t.half().float()
        return t.to(self.dtype)

    def r(self, x: torch.Tensor) -> torch.Tensor:
        """Rounds an element-wise op's output as the compute dtype does (float16
        emulation only; bfloat16 ops already return bfloat16)."""
        return x.half().float() if self.name == "float16" else x

    def mm(self, fn, *operands):
        """A matmul-type op: `fn` on the operands widened to float32 (float32
        accumulation), the result rounded once to the compute dtype."""
        out = fn(*(None if t is None else t.to(torch.float32) for t in operands))
        if self.name == "float16":
            return out.half().float()
        return out.to(self.dtype)


# ----------------------------------------------------------------------------- cache

class KVCache:
    """A transformers-style dynamic cache: per layer keys/values [1, h_kv, t, d]."""

    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        self.keys: List[Optional[torch.Tensor]] = [None] * num_layers
        self.values: List[Optional[torch.Tensor]] = [None] * num_layers

    def update(self, layer_idx: int, k_new: torch.Tensor, v_new: torch.Tensor):
        """Appends the step's records along t and returns the layer's whole cache."""
        if self.keys[layer_idx] is None:
            self.keys[layer_idx], self.values[layer_idx] = k_new, v_new
        else:
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], k_new], dim=2)
            self.values[layer_idx] = torch.cat([self.values[layer_idx], v_new], dim=2)
        return self.keys[layer_idx], self.values[layer_idx]

    def key_index(self, layer_idx: int) -> Optional[torch.Tensor]:
        """The cache index of each key update() last returned for the layer (None: 0..t-1,
        the entries in stream order)."""
        return None

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Entries in the layer's cache (0 before the prefill)."""
        k = self.keys[layer_idx]
        return 0 if k is None else int(k.shape[2])

    def crop(self, max_length: int) -> None:
        """Keeps the first `max_length` entries of every layer (transformers'
        DynamicCache.crop: how speculative decoding drops the rejected drafts)."""
        for l in range(self.num_layers):
            if self.keys[l] is not None and self.keys[l].shape[2] > max_length:
                self.keys[l] = self.keys[l][:, :, :max_length, :]
                self.values[l] = self.values[l][:, :, :max_length, :]

    def reset(self) -> None:
        """Empties every layer (what a scheduler does before reusing the slot)."""
        self.keys = [None] * self.num_layers
        self.values = [None] * self.num_layers

    def snapshot(self) -> Tuple[List[np.ndarray], List[np.ndarray]]:
        """Float32 numpy copies of every layer's whole cache, [h_kv, t, d]."""
        def one(t):
            return t[0].detach().to(torch.float32).clone().numpy()
        return [one(k) for k in self.keys], [one(v) for v in self.values]


# ----------------------------------------------------------------------------- model

class Model:
    """GPT-2 or Llama-family forward over a KVCache, in one compute dtype."""

    def __init__(self, directory: str, dtype: str = "float32"):
        self.cfg = ModelConfig(directory)
        self.prec = Precision(dtype)
        self.load_weights(directory)

    # ---- weights
    def load_weights(self, directory: str) -> None:
        """Loads (or swaps in) the weights of a checkpoint of the same shape."""
        cfg = ModelConfig(directory)
        if cfg.shape_key() != self.cfg.shape_key():
            raise ValueError(f"{directory}: config does not match the loaded model's shape")
        raw = st_numpy.load_checkpoint(directory)
        self.directory = directory
        p = self.prec.param

        def get(name: str, optional: bool = False):
            if name not in raw:
                if optional:
                    return None
                raise ValueError(f"{directory}: missing tensor '{name}' (needed by {cfg.model_type})")
            return p(raw[name])
        L = cfg.num_layers
        if cfg.model_type == "gpt2":
            pre = "transformer." if "transformer.wte.weight" in raw else ""
            self.wte, self.wpe = get(pre + "wte.weight"), get(pre + "wpe.weight")
            self.ln_f = (get(pre + "ln_f.weight"), get(pre + "ln_f.bias"))
            self.layers = []
            for l in range(L):
                b = f"{pre}h.{l}."
                self.layers.append({n: get(b + n) for n in (
                    "ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_attn.weight",
                    "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_fc.weight",
                    "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")})
            head = None if cfg.tie else get("lm_head.weight", optional=True)
            self.lm_head = self.wte if head is None else head
        else:
            self.embed = get("model.embed_tokens.weight")
            self.norm = get("model.norm.weight")
            self.layers = []
            for l in range(L):
                b = f"model.layers.{l}."
                w = {n: get(b + n) for n in (
                    "input_layernorm.weight", "post_attention_layernorm.weight",
                    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                    "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                    "mlp.down_proj.weight")}
                for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                    w[f"self_attn.{n}.bias"] = get(f"{b}self_attn.{n}.bias", optional=True)
                self.layers.append(w)
            head = get("lm_head.weight", optional=cfg.tie)
            self.lm_head = self.embed if head is None else head

    # ---- small ops (each rounds its output as the compute dtype does)
    def _linear(self, x, w, b=None):
        """nn.Linear: x @ w.T + b with w [out, in]."""
        return self.prec.mm(F.linear, x, w, b)

    def _conv1d(self, x, w, b):
        """GPT-2 Conv1D: x @ w + b with w stored [in, out]."""
        return self.prec.mm(torch.addmm, b, x, w)

    def _gelu_new(self, x):
        """transformers' NewGELUActivation (tanh approximation), op by op."""
        r = self.prec.r
        inner = r(x + r(0.044715 * r(torch.pow(x, 3.0))))
        return r(r(0.5 * x) * r(1.0 + r(torch.tanh(r(math.sqrt(2.0 / math.pi) * inner)))))

    def _rms_norm(self, x, w):
        """LlamaRMSNorm: float32 statistics, cast back, times the weight."""
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.cfg.eps)
        return self.prec.r(w * self.prec.r(h.to(x.dtype)))

    def _inv_freq(self, scaled: bool = True) -> torch.Tensor:
        """RoPE inverse frequencies [d/2] (float32): 1 / theta^(2i/d), then the config's
        scaling unless `scaled` is False. linear divides every frequency by the factor;
        llama3 (transformers' _compute_llama3_parameters) divides the low frequencies
        (wavelength above original / low_freq_factor), keeps the high ones (below original /
        high_freq_factor) and interpolates smoothly in between."""
        rope, d = self.cfg.rope, self.cfg.head_dim
        inv = 1.0 / (rope["theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        if not scaled or rope["type"] == "default":
            return inv
        factor = rope["factor"]
        if rope["type"] == "linear":
            return inv / factor
        original, low, high = rope["original"], rope["low"], rope["high"]
        wavelen = 2 * math.pi / inv
        low_freq_wavelen, high_freq_wavelen = original / low, original / high
        out = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
        smooth = (original / wavelen - low) / (high - low)
        between = (1 - smooth) * out / factor + smooth * out
        medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
        return torch.where(medium, between, out)

    def _rope(self, positions: torch.Tensor, scaled: bool = True):
        """cos, sin [n, d] for the positions (float32 math, cast to the compute dtype)."""
        inv = self._inv_freq(scaled)
        freqs = positions.float()[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return self.prec.r(emb.cos().to(self.prec.dtype)), self.prec.r(emb.sin().to(self.prec.dtype))

    def _apply_rope(self, x, cos, sin):
        """x [1, h, n, d] -> x * cos + rotate_half(x) * sin."""
        r = self.prec.r
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return r(r(x * cos) + r(rot * sin))

    def _attend(self, q, k_all, v_all, past: int, scale: float, window: Optional[int] = None,
                key_index: Optional[torch.Tensor] = None):
        """Eager attention of q [1, h, n, d] over the cache [1, h_kv, t, d]; query i sees
        entries j <= past + i (transformers' cache_position mask), and with a sliding
        `window` W only j > past + i - W. `key_index`: the cache index of each of the t keys
        (default 0..t-1). A sliding layer attends over the keys some query can see, gathered
        in cache-index order (the others would get probability 0)."""
        r = self.prec.r
        n = q.shape[2]
        query_index = past + torch.arange(n)
        if window is None and key_index is None:
            allowed = torch.arange(k_all.shape[2])[None, :] <= query_index[:, None]
        else:
            index = torch.arange(k_all.shape[2]) if key_index is None else key_index
            lowest = int(query_index[0]) - window if window else -1
            seen = ((index > lowest) & (index <= int(query_index[-1]))).nonzero()[:, 0]
            order = seen[torch.argsort(index[seen])]
            k_all, v_all, index = k_all[:, :, order], v_all[:, :, order], index[order]
            allowed = index[None, :] <= query_index[:, None]
            if window:
                allowed &= index[None, :] > query_index[:, None] - window
        rep = self.cfg.num_heads // self.cfg.num_kv_heads
        if rep > 1:
            k_all, v_all = k_all.repeat_interleave(rep, dim=1), v_all.repeat_interleave(rep, dim=1)
        scores = r(self.prec.mm(torch.matmul, q, k_all.transpose(2, 3)) * scale)
        scores = scores.to(torch.float32).masked_fill(~allowed, float("-inf"))
        probs = r(torch.softmax(scores, dim=-1).to(q.dtype))
        return self.prec.mm(torch.matmul, probs, v_all)

    # ---- forward
    @torch.no_grad()
    def forward(self, ids: List[int], positions: List[int], cache: KVCache,
                unscaled_rope_layers: Optional[Set[int]] = None,
                layer_positions: Optional[Dict[int, List[int]]] = None) -> torch.Tensor:
        """Runs the fed tokens at the given position ids over the cache (which update()
        extends) and returns float32 logits [n, V]. `unscaled_rope_layers`: layers whose
        queries and keys rotate without the config's RoPE scaling (the rope_scaling bug).
        `layer_positions`: layers whose queries and keys rotate at other position ids (the
        chunk_position bug; RoPE models only)."""
        cfg = self.cfg
        if len(ids) != len(positions) or not ids:
            raise ValueError(f"{len(ids)} ids for {len(positions)} positions")
        if any(not 0 <= t < cfg.vocab_size for t in ids):
            raise ValueError(f"token id outside the vocabulary ({cfg.vocab_size}) in {ids}")
        ids_t = torch.tensor(ids, dtype=torch.int64)
        pos_t = torch.tensor(positions, dtype=torch.int64)
        past = cache.get_seq_length()
        if cfg.model_type == "gpt2":
            if layer_positions:
                raise ValueError("gpt2 takes its positions once, at the input (no per-layer RoPE)")
            h = self._forward_gpt2(ids_t, pos_t, cache, past)
        else:
            h = self._forward_llama(ids_t, pos_t, cache, past, unscaled_rope_layers or set(),
                                    layer_positions or {})
        return self.prec.mm(F.linear, h, self.lm_head).to(torch.float32)

    def _heads(self, x, h):
        """[n, h*d] -> [1, h, n, d]."""
        return x.view(x.shape[0], h, self.cfg.head_dim).transpose(0, 1).unsqueeze(0)

    def _merge(self, x):
        """[1, h, n, d] -> [n, h*d]."""
        return x[0].transpose(0, 1).reshape(x.shape[2], -1)

    def _forward_gpt2(self, ids, pos, cache, past):
        cfg, r = self.cfg, self.prec.r
        if int(pos.min()) < 0 or int(pos.max()) >= cfg.max_positions:
            raise ValueError(f"position ids {pos.tolist()} outside [0, n_positions={cfg.max_positions})")
        h = r(F.embedding(ids, self.wte) + F.embedding(pos, self.wpe))
        for l, w in enumerate(self.layers):
            x = r(F.layer_norm(h, (cfg.hidden,), w["ln_1.weight"], w["ln_1.bias"], cfg.eps))
            qkv = self._conv1d(x, w["attn.c_attn.weight"], w["attn.c_attn.bias"])
            q, k, v = qkv.split(cfg.hidden, dim=-1)
            q, k, v = (self._heads(t, cfg.num_heads) for t in (q, k, v))
            k_all, v_all = cache.update(l, k, v)
            scale = (1.0 / math.sqrt(cfg.head_dim)) if cfg.scale_attn else 1.0
            if cfg.scale_by_layer:
                scale /= float(l + 1)
            a = self._merge(self._attend(q, k_all, v_all, past, scale))
            h = r(h + self._conv1d(a, w["attn.c_proj.weight"], w["attn.c_proj.bias"]))
            x = r(F.layer_norm(h, (cfg.hidden,), w["ln_2.weight"], w["ln_2.bias"], cfg.eps))
            m = self._gelu_new(self._conv1d(x, w["mlp.c_fc.weight"], w["mlp.c_fc.bias"]))
            h = r(h + self._conv1d(m, w["mlp.c_proj.weight"], w["mlp.c_proj.bias"]))
        return r(F.layer_norm(h, (cfg.hidden,), self.ln_f[0], self.ln_f[1], cfg.eps))

    def _forward_llama(self, ids, pos, cache, past, unscaled_layers, layer_positions):
        cfg, r = self.cfg, self.prec.r
        h = F.embedding(ids, self.embed)
        scaled = self._rope(pos)
        unscaled = self._rope(pos, scaled=False) if unscaled_layers else scaled
        for l, w in enumerate(self.layers):
            if l in layer_positions:  # chunk_position: this layer rotates at other ids
                own = torch.tensor(layer_positions[l], dtype=torch.int64)
                cos, sin = self._rope(own, scaled=l not in unscaled_layers)
            else:
                cos, sin = unscaled if l in unscaled_layers else scaled
            x = self._rms_norm(h, w["input_layernorm.weight"])
            q = self._heads(self._linear(x, w["self_attn.q_proj.weight"], w["self_attn.q_proj.bias"]), cfg.num_heads)
            k = self._heads(self._linear(x, w["self_attn.k_proj.weight"], w["self_attn.k_proj.bias"]), cfg.num_kv_heads)
            v = self._heads(self._linear(x, w["self_attn.v_proj.weight"], w["self_attn.v_proj.bias"]), cfg.num_kv_heads)
            q, k = self._apply_rope(q, cos, sin), self._apply_rope(k, cos, sin)
            k_all, v_all = cache.update(l, k, v)
            a = self._merge(self._attend(q, k_all, v_all, past, cfg.head_dim ** -0.5, cfg.windows[l],
                                         cache.key_index(l)))
            h = r(h + self._linear(a, w["self_attn.o_proj.weight"], w["self_attn.o_proj.bias"]))
            x = self._rms_norm(h, w["post_attention_layernorm.weight"])
            g = r(F.silu(self._linear(x, w["mlp.gate_proj.weight"])))
            u = self._linear(x, w["mlp.up_proj.weight"])
            h = r(h + self._linear(r(g * u), w["mlp.down_proj.weight"]))
        return self._rms_norm(h, self.norm)

    def model_info(self, fingerprint: str = "", stored_dtype: str = "") -> Dict[str, object]:
        """The trace's model block."""
        c = self.cfg
        return {"num_layers": c.num_layers, "num_heads": c.num_heads, "num_kv_heads": c.num_kv_heads,
                "head_dim": c.head_dim, "vocab_size": c.vocab_size, "max_positions": c.max_positions,
                "architecture": c.model_type, "directory": os.path.abspath(c.directory),
                "fingerprint": fingerprint, "stored_dtype": stored_dtype,
                "compute_dtype": self.prec.name, **self._rope_info()}

    def _rope_info(self) -> Dict[str, object]:
        """model.rope_parameters for a scaled RoPE (docs/trace-format.md), HF's names."""
        rope = getattr(self.cfg, "rope", None)
        if not rope or rope["type"] == "default":
            return {}
        out = {"rope_type": rope["type"], "rope_theta": rope["theta"], "factor": rope["factor"]}
        if rope["type"] == "llama3":
            out.update(low_freq_factor=rope["low"], high_freq_factor=rope["high"],
                       original_max_position_embeddings=rope["original"])
        return {"rope_parameters": out}
