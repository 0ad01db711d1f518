"""Record a KV Scope trace from MLX-LM (Apple's MLX; `mlx[cpu]` runs on Linux too).

    kvscope-record --engine mlx --model MODEL_DIR --prompt-ids 1,2,3 --max-new N \
        [--save-state FINAL.safetensors] --out RUN.kvtrace

mlx-lm loads the checkpoint (`mlx_lm.load`: HuggingFace safetensors or an MLX conversion) and
runs it with its own cache (`make_prompt_cache`: a KVCache per layer, or Llama 4's
ChunkedKVCache on its chunked layers); after every forward the recorder takes the logits row
and, per layer, the rows the forward appended (the last ones the layer holds). A ChunkedKVCache
drops the rows before the current chunk (`maybe_trim_front`): its layers are recorded as
chunked (`layer_kinds`), with the entries fed as their length and without checksums, which
would cover only the rows it kept. DeepSeek's latent attention (layer_kinds "latent"): mlx-lm's
V3 KVCache holds the latent rows and roped key parts as transformers 5 does, but turns the roped
part as pairs (2i, 2i+1) left in place (traditional RoPE), where V3 with `rope_interleave` writes
the turned pairs de-interleaved (evens, then odds): the recorder reads V3's values in that order.
mlx-lm's V2 caches each head's decompressed key and value (model.latent_records "heads").
Qwen3-Next's and Qwen3.5's Gated DeltaNet layers keep an ArraysCache (the conv's last K-1
inputs, the recurrent state): recorded as layer_kinds "recurrent" with their states after the
prefill and every `--state-every` steps (the conv state [C, K-1], the recurrent state turned to
transformers' [Hv, Dk, Dv]). mlx-lm builds these models' layers from `full_attention_interval`
(default 4), not from `layer_types`. Tokens are chosen with KV Scope's policy and
generator (hf_trace.decode). `--save-state` writes the last request's cache with mlx-lm's own
`save_prompt_cache`, its metadata naming the tokens it holds ("tokens": "1,2,3"), which
`kvscope-cli audit --model DIR --trace FILE.safetensors` reads (kvscope/MlxPromptCacheTrace.hpp).

`MlxSession` is the engine for tests and bug reproductions: `forward(ids, positions, cache)`,
`cache` (the mlx-lm cache list of the current request), `trim(n)` (mlx-lm's
trim_prompt_cache).
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import __version__
from . import trace as kvtrace


_READ = ("KVCache", "ChunkedKVCache", "ArraysCache", "MambaCache")
# mlx-lm's cache of a Gated DeltaNet layer (Qwen3-Next, Qwen3.5): ArraysCache (MambaCache, its
# subclass in older mlx-lm), entry 0 the conv inputs, entry 1 the recurrent state.
_STATE = ("ArraysCache", "MambaCache")


def is_state_layer(c) -> bool:
    """Whether an mlx-lm cache layer keeps a Gated DeltaNet state (no rows)."""
    return type(c).__name__ in _STATE


def layer_state(c) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """A Gated DeltaNet layer's state as the trace records it (None before its first forward):
    conv [1, C, K-1] (mlx-lm keeps the conv's last K-1 inputs time-major, [1, K-1, C];
    transformers keeps K, and the trace takes either) and recurrent [1, Hv, Dk, Dv] (mlx-lm's
    gated delta rule keeps [1, Hv, Dv, Dk]), float32 copies."""
    if c[0] is None or c[1] is None:
        return None
    mx = _mx()
    conv = np.array(c[0].astype(mx.float32)).transpose(0, 2, 1)
    state = np.array(c[1].astype(mx.float32)).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(conv), np.ascontiguousarray(state)


def _offset(mlx_cache) -> int:
    """Entries the cache has been fed: its first row-keeping layer's offset (a state layer
    keeps none)."""
    return next((int(c.offset) for c in mlx_cache if not is_state_layer(c)), 0)


def _held(c):
    """The rows an mlx-lm cache layer holds, [1, h_kv, t, d] float32 mlx arrays (None when
    empty or a state layer): a KVCache's first `offset`, a ChunkedKVCache's since its
    `start_position`."""
    if is_state_layer(c) or c.keys is None:
        return None, None
    n = c.offset - getattr(c, "start_position", 0)
    mx = _mx()
    return c.keys[..., :n, :].astype(mx.float32), c.values[..., :n, :].astype(mx.float32)


def layer_kinds(mlx_cache) -> Optional[List[Dict[str, Any]]]:
    """The trace's layer_kinds for an mlx-lm cache with chunked layers (None without one)."""
    names = [type(c).__name__ for c in mlx_cache]
    for i, n in enumerate(names):
        if n not in _READ:
            raise TypeError(f"cache layer {i} is an mlx-lm {n}; the recorder reads KVCache, ChunkedKVCache and "
                            "ArraysCache (a Gated DeltaNet layer's state)")
    if "ChunkedKVCache" not in names:
        return None
    return [{"kind": "chunked", "chunk": int(c.chunk_size)} if type(c).__name__ == "ChunkedKVCache"
            else {"kind": "full"} for c in mlx_cache]


class _CacheView:
    """An mlx-lm cache as hf_trace's cache adapter reads it (`layers[i].keys/.values`,
    [1, h_kv, t, d] numpy: the rows each layer holds; `logical_lengths`: the entries fed to
    each; and what the latest forward appended), holding the mlx-lm cache the next forward
    continues."""

    def __init__(self, mlx_cache, fed: int, value_order: Optional[np.ndarray] = None):
        from .hf_trace import APPENDED_ATTR
        self.mlx = mlx_cache
        self.value_order = value_order
        self.logical_lengths = [0 if is_state_layer(c) else int(c.offset) for c in mlx_cache]
        appended = {}
        for i, c in enumerate(mlx_cache):
            k, v = _held(c)
            if k is not None:
                appended[i] = (np.array(k[..., k.shape[2] - fed:, :]), self._values(v[..., v.shape[2] - fed:, :]))
        setattr(self, APPENDED_ATTR, appended)

    def _values(self, v) -> np.ndarray:
        v = np.array(v)
        return v if self.value_order is None else v[..., self.value_order]

    @property
    def layers(self):
        layer_kinds(self.mlx)  # refuses a layer type it cannot read
        out = []
        for c in self.mlx:
            if is_state_layer(c):  # hf_trace reads it as transformers' LinearAttentionLayer
                st = layer_state(c)
                out.append(SimpleNamespace(conv_states=[None if st is None else st[0]],
                                           recurrent_states=[None if st is None else st[1]]))
                continue
            k, v = _held(c)
            out.append(SimpleNamespace(keys=None if k is None else np.array(k), values=None if v is None else self._values(v)))
        return out


def latent_value_order(config) -> Optional[np.ndarray]:
    """The feature order to read mlx-lm's roped key parts (a latent layer's values) in: mlx-lm
    turns DeepSeek's pairs (2i, 2i+1) in place; V3 with rope_interleave (transformers, the trace)
    holds the turned pairs evens first, then odds. None: as they are (V2 keeps them in place)."""
    from .hf_trace import latent_attention, text_config
    c = text_config(config)
    if not latent_attention(config) or getattr(c, "model_type", "") != "deepseek_v3" or \
            not getattr(c, "rope_interleave", True):
        return None
    r = int(c.qk_rope_head_dim)
    return np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2)])


def _mx():
    import mlx.core as mx
    return mx


class MlxSession:
    def __init__(self, model_dir: str):
        from mlx_lm import load  # lazily: the rest of the package needs numpy only
        import transformers

        self.model, self.tokenizer = load(model_dir)
        self.model_dir = model_dir
        self.hf_config = transformers.AutoConfig.from_pretrained(model_dir)  # the checkpoint's, read once
        self.cache = None
        self.layout = self._latent_layout()
        self.value_order = latent_value_order(self.hf_config) if self.layout == "latent" else None

    def _latent_layout(self) -> Optional[str]:
        """What mlx-lm caches of a latent-attention model (None: the config has none): "latent"
        (V3: latent rows and roped key parts) or "heads" (V2: each head's decompressed key and
        value), read off a one-token forward's cache."""
        if not self.latent():
            return None
        self.new_cache()
        self.logits([0])
        heads = int(next(c for c in self.cache if not is_state_layer(c)).keys.shape[1])
        self.cache = None
        return "heads" if heads == int(self.hf_config.num_attention_heads) and heads > 1 else "latent"

    def latent(self) -> bool:
        from .hf_trace import latent_attention
        return latent_attention(self.hf_config)

    def new_cache(self):
        from mlx_lm.models.cache import make_prompt_cache
        self.cache = make_prompt_cache(self.model)
        return self.cache

    def logits(self, ids: List[int]) -> np.ndarray:
        mx = _mx()
        out = self.model(mx.array([ids]), cache=self.cache)
        mx.eval(out)
        return np.array(out[0, -1].astype(mx.float32))

    def forward(self, ids: List[int], positions: List[int], cache):
        """hf_trace.decode's forward: a new request (cache None) starts an empty cache. mlx-lm
        places the fed tokens at the cache's offset; positions that say otherwise are refused."""
        if cache is None:
            self.new_cache()
        offset = _offset(self.cache)
        if positions[0] != offset:
            raise ValueError(f"mlx-lm feeds at the cache offset {offset}, not position {positions[0]}")
        return self.logits(ids), _CacheView(self.cache, len(ids), self.value_order)

    def trim(self, n: int) -> int:
        from mlx_lm.models.cache import trim_prompt_cache
        return trim_prompt_cache(self.cache, n)

    def save(self, path: str, tokens: List[int]) -> None:
        from mlx_lm.models.cache import save_prompt_cache
        save_prompt_cache(path, self.cache, {"tokens": ",".join(str(int(t)) for t in tokens)})

    def model_info(self, fingerprint: bool = True) -> Dict[str, Any]:
        from .hf_trace import model_info, text_config

        from mlx.utils import tree_flatten

        cfg = self.hf_config
        kinds = {str(v.dtype).split(".")[-1] for _, v in tree_flatten(self.model.parameters())}
        dtype = "bfloat16" if "bfloat16" in kinds else "float16" if "float16" in kinds else "float32"
        vocab = int(text_config(cfg).vocab_size)  # a multimodal config (Llama 4): its text model's
        return model_info(cfg, self.model_dir, vocab, dtype, fingerprint=fingerprint, latent_layout=self.layout)

    def engine_name(self) -> str:
        import mlx.core
        import mlx_lm
        return f"mlx-lm {mlx_lm.__version__} (mlx {mlx.core.__version__}, kvscope-record {__version__})"


def record(args, policy: Dict[str, Any]) -> int:
    """kvscope-record --engine mlx."""
    from .hf_trace import TraceRecorder, decode

    if args.uncached:
        raise SystemExit("kvscope-record: --uncached is transformers' reference; mlx-lm records its cached "
                         "run (the audit recomputes the reference)")
    if not os.path.isdir(args.model):
        raise SystemExit(f"kvscope-record: --engine mlx loads a model folder, not {args.model}")
    s = MlxSession(args.model)
    prompts: List[Tuple[List[int], str]] = [(list(s.tokenizer.encode(t)), t) for t in args.prompt]
    prompts += [([int(x) for x in p.split(",") if x.strip()], "") for p in args.prompt_ids]
    info = s.model_info(fingerprint=not args.no_fingerprint)
    kinds = layer_kinds(s.new_cache())
    if kinds and args.snapshots:
        raise SystemExit("kvscope-record: --snapshots needs every row of each layer; mlx-lm's ChunkedKVCache "
                         "keeps only the current chunk's")
    rec = TraceRecorder(info, engine=s.engine_name(), snapshots=args.snapshots, dtype=args.store,
                        checksums=not kinds,  # a chunked layer's checksum would cover the rows it kept
                        latent=s.latent(), state_every=args.state_every)
    if kinds:
        rec.writer.extra["layer_kinds"] = kinds
    eos = s.tokenizer.eos_token_ids if hasattr(s.tokenizer, "eos_token_ids") else []
    last: List[int] = []
    for rid, (ids, text) in enumerate(prompts):
        out = decode(s.forward, rec, rid, ids, args.max_new, policy, eos_ids=sorted(eos),
                     stop_at_eos=not args.ignore_eos, max_positions=info["max_positions"], prompt_text=text)
        last = ids + out[:-1]  # the cache holds all but the last chosen token
        print(f"request {rid}: {len(ids)} prompt tokens -> {out}")
    rec.save(args.out)
    print(f"wrote {args.out}")
    if args.save_state:
        if not args.save_state.endswith(".safetensors"):
            raise SystemExit("kvscope-record: mlx-lm's save_prompt_cache writes a .safetensors file")
        s.save(args.save_state, last)
        print(f"wrote {args.save_state}")
    return 0

