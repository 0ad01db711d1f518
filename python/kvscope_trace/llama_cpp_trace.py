"""Record a KV Scope trace from llama.cpp (through llama-cpp-python's low-level API).

    kvscope-record --engine llama.cpp --model MODEL.gguf --prompt-ids 1,2,3 --max-new N \
        [--cache-type-k f16|q8_0|q4_0|f32|bf16 --cache-type-v ...] [--flash-attn on|off] \
        [--save-state FINAL.ggsq] --out RUN.kvtrace

llama.cpp runs the GGUF as it always does (its kernels, its cache types, one sequence); after
every `llama_decode` the recorder takes the logits row and the sequence's cache as llama.cpp
serialises it (`llama_state_seq_get_data`, read by `llama_state.py`), and records the rows
that are new since the previous step. Tokens are chosen with KV Scope's sampling policy and
generator (hf_trace.decode), so the audit replays sampled runs from the seed. A q8_0 / q4_0
cache is declared in the trace (kv_cache), an f16 cache is stored as F16 (its exact values).
The compute dtype declared is llama.cpp's: the activations are rounded to the weights'
dot-product type (F16 weights: float16; BF16: bfloat16; block-quantised weights: 8-bit
blocks, budgeted as bfloat16) or, where that is coarser, to the cache's type (the queries
meet a q8_0 / q4_0 cache in 8-bit blocks: bfloat16 too) or flash attention's (float16).

`LlamaCppSession` is the engine for tests and bug reproductions: `forward(ids, positions,
cache)` is the decode loop's forward; `memory()` is the llama_memory_t for seq_cp / seq_rm.
"""

from __future__ import annotations

import ctypes
import os
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import __version__
from . import llama_state
from . import trace as kvtrace

# GGUF architecture -> the HF model_type it was converted from, and whether the converter
# permuted q/k into rotary pairs (i, i+1) (LlamaModel.permute): the ones KV Scope audits.
# Gemma 2 and 3 run llama.cpp's iswa cache (their sliding layers in a second cache).
ARCHITECTURES = {"llama": ("llama", True), "qwen2": ("qwen2", False), "qwen3": ("qwen3", False),
                 "gemma2": ("gemma2", False), "gemma3": ("gemma3_text", False)}
# llama.cpp's SWA period where the GGUF names none (src/models/gemma2.cpp, gemma3.cpp:
# load_swa_pattern's default): every n-th layer global.
SWA_PERIOD = {"gemma2": 2, "gemma3": 6}
FLOAT_WEIGHTS = {0: "float32", 1: "float16", 32: "bfloat16"}  # general.file_type (LLAMA_FTYPE_*)
RANK = {"float32": 0, "float16": 1, "bfloat16": 2}


def compute_dtype(file_type: int, cache_type: str, flash_attn: str) -> str:
    """The coarsest rounding llama.cpp's CPU path applies: the weights' dot type, the cache's,
    and flash attention's (its CPU kernel rounds the queries and the value sums to float16;
    "auto" turns it on)."""
    weights = FLOAT_WEIGHTS.get(file_type, "bfloat16")  # quantised weights: 8-bit activations
    # a quantised cache: the queries are rounded to its 8-bit blocks for the dot products
    cache = {"f32": "float32", "f16": "float16"}.get(cache_type, "bfloat16")
    attention = "float32" if flash_attn == "off" else "float16"
    return max(weights, cache, attention, key=lambda d: RANK[d])


class LlamaCppSession:
    """One llama.cpp context over one GGUF, decoding sequence 0 (or `seq` of `sequences`)."""

    def __init__(self, gguf: str, n_ctx: int, cache_type_k: str = "f16", cache_type_v: str = "f16",
                 flash_attn: str = "auto", threads: int = 1, quiet: bool = True, sequences: int = 1):
        import llama_cpp as L  # lazily: the reader and the tests of the parser need numpy only

        self.L = L
        if quiet:
            self._log = L.llama_log_callback(lambda level, text, data: None)
            L.llama_log_set(self._log, ctypes.c_void_p())
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(gguf.encode(), L.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"{gguf}: llama.cpp could not load the model")
        for name, t in (("--cache-type-k", cache_type_k), ("--cache-type-v", cache_type_v)):
            if t not in llama_state.CACHE_TYPE_IDS:
                raise ValueError(f"{name} {t}: one of {', '.join(llama_state.CACHE_TYPE_IDS)}")
        cp = L.llama_context_default_params()
        cp.n_ctx = cp.n_batch = cp.n_ubatch = n_ctx
        cp.n_seq_max = sequences
        cp.kv_unified = True  # one cache stream shared by the sequences (what seq_cp needs)
        cp.n_threads = cp.n_threads_batch = threads
        cp.type_k = llama_state.CACHE_TYPE_IDS[cache_type_k]
        cp.type_v = llama_state.CACHE_TYPE_IDS[cache_type_v]
        cp.flash_attn_type = {"auto": -1, "off": 0, "on": 1}[flash_attn]
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError(f"{gguf}: llama.cpp refused the context with cache types {cache_type_k}/"
                               f"{cache_type_v} (a quantised V cache needs --flash-attn on, a "
                               "quantised cache a head size that its 32-value blocks divide)")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.cache_types = (cache_type_k, cache_type_v)
        self.flash_attn = flash_attn
        self.arch = self.meta("general.architecture")
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"{gguf}: architecture {self.arch!r}; the recorder reads the caches of "
                             f"{', '.join(ARCHITECTURES)}")
        self.model_type, self.permuted = ARCHITECTURES[self.arch]
        heads = L.llama_model_n_head(self.model)
        self.kv_heads = L.llama_model_n_head_kv(self.model)
        key_length = self.meta(f"{self.arch}.attention.key_length")
        self.head_dim = int(key_length) if key_length else L.llama_model_n_embd(self.model) // heads
        self.heads, self.n_ctx = heads, n_ctx
        self.n_swa = L.llama_model_n_swa(self.model)  # the sliding window, 0 without one
        self.swa = self._swa_layers() if self.n_swa > 0 else None
        self.batch = L.llama_batch_init(n_ctx, 0, 1)

    def _swa_layers(self) -> Optional[List[bool]]:
        """Which layers llama.cpp runs with the sliding window (its iswa cache's second part): the
        GGUF's pattern (flags or a period), else the architecture's default period."""
        raw = self.meta(f"{self.arch}.attention.sliding_window_pattern").strip()
        layers = self.L.llama_model_n_layer(self.model)
        if raw.startswith("["):
            flags = [x.strip().lower() in ("true", "1") for x in raw[1:-1].split(",") if x.strip()]
            return llama_state.swa_layers(flags, layers)
        if raw:
            return llama_state.swa_layers(int(raw), layers)
        return llama_state.swa_layers(SWA_PERIOD[self.arch], layers) if self.arch in SWA_PERIOD else None

    def meta(self, key: str) -> str:
        buf = ctypes.create_string_buffer(256)
        n = self.L.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode() if n >= 0 else ""

    def memory(self):
        return self.L.llama_get_memory(self.ctx)

    def decode(self, ids: Sequence[int], positions: Sequence[int], seq: int = 0) -> np.ndarray:
        """Feeds `ids` at `positions` to sequence `seq`; the last one's logits row."""
        if len(ids) > self.n_ctx:
            raise ValueError(f"{len(ids)} tokens in one batch; the context holds {self.n_ctx}")
        b = self.batch
        b.n_tokens = len(ids)
        for i, (t, p) in enumerate(zip(ids, positions)):
            b.token[i], b.pos[i], b.n_seq_id[i] = int(t), int(p), 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if i == len(ids) - 1 else 0
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        n = self.L.llama_vocab_n_tokens(self.vocab)
        row = self.L.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(row, shape=(n,)).astype(np.float32).copy()

    def state(self, seq: int = 0) -> bytes:
        n = self.L.llama_state_seq_get_size(self.ctx, seq)
        buf = (ctypes.c_uint8 * n)()
        got = self.L.llama_state_seq_get_data(self.ctx, buf, n, seq)
        if got != n:
            raise RuntimeError(f"llama_state_seq_get_data wrote {got} of {n} bytes")
        return bytes(buf)

    def cache(self, seq: int = 0):
        """The sequence's cache as (k, v) per layer [1, h_kv, cells, d], cells by position."""
        layers, _ = llama_state.as_cache(llama_state.parse(self.state(seq)), self.kv_heads,
                                         self.head_dim, self.permuted, self.swa)
        return layers

    def forward(self, ids: List[int], positions: List[int], cache):
        """hf_trace.decode's forward: a new request (cache None) starts from an empty cache. An
        iswa model's cache comes as the rows each layer holds (_HeldRows)."""
        if cache is None:
            self.L.llama_memory_clear(self.memory(), True)
        logits = self.decode(ids, positions)
        if self.swa is None:
            return logits, self.cache()
        layers = llama_state.held_layers(llama_state.parse(self.state()), self.kv_heads, self.head_dim,
                                         self.permuted, self.swa)
        return logits, _HeldRows(layers, positions, self.n_swa)

    def save_state(self, path: str, tokens: Sequence[int], seq: int = 0) -> None:
        arr = (self.L.llama_token * len(tokens))(*[int(t) for t in tokens])
        if not self.L.llama_state_seq_save_file(self.ctx, path.encode(), seq, arr, len(tokens)):
            raise RuntimeError(f"llama_state_seq_save_file({path}) failed")

    def tokenize(self, text: str) -> List[int]:
        raw = text.encode()
        buf = (self.L.llama_token * (len(raw) + 8))()
        n = self.L.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), True, False)
        if n < 0:
            raise ValueError(f"the prompt needs {-n} tokens")
        return list(buf[:n])

    def eos_ids(self) -> List[int]:
        n = self.L.llama_vocab_n_tokens(self.vocab)
        return [t for t in range(n) if self.L.llama_vocab_is_eog(self.vocab, t)]

    def model_info(self, gguf: str, fingerprint: bool = True) -> Dict[str, Any]:
        file_type = int(self.meta("general.file_type") or 1)
        return {"fingerprint": kvtrace.model_fingerprint(gguf) if fingerprint else "",
                "architecture": self.model_type, "directory": os.path.abspath(gguf),
                "num_layers": self.L.llama_model_n_layer(self.model), "num_heads": self.heads,
                "num_kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "vocab_size": self.L.llama_vocab_n_tokens(self.vocab),
                "max_positions": self.L.llama_model_n_ctx_train(self.model),
                "stored_dtype": kvtrace.model_stored_dtype(gguf),
                "compute_dtype": compute_dtype(file_type, max(self.cache_types, key=_coarseness),
                                               self.flash_attn)}

    def declare_cache(self, writer: kvtrace.TraceWriter) -> None:
        """A q8_0 / q4_0 cache declared as such (one type for K and V)."""
        k, v = self.cache_types
        if k in ("q8_0", "q4_0") or v in ("q8_0", "q4_0"):
            if k != v:
                raise ValueError(f"K cache {k}, V cache {v}: the trace declares one cache type")
            writer.extra["kv_cache"] = {"dtype": k, "scale": "per_block"}

    def engine_name(self) -> str:
        import llama_cpp
        return (f"llama.cpp (llama-cpp-python {llama_cpp.__version__}, kvscope-record "
                f"{__version__}, cache {self.cache_types[0]}/{self.cache_types[1]})")


class _HeldRows:
    """An iswa model's cache after a step as hf_trace's recorder reads it: `layers[i].keys /
    .values` the rows each layer holds ([1, h_kv, t, d], by position: a sliding layer only its
    window's), `logical_lengths` the entries fed, and the step's own rows (the last of each
    layer's), which llama.cpp still holds as long as one step feeds no more than the window."""

    def __init__(self, layers, fed_positions: Sequence[int], window: int):
        from .hf_trace import APPENDED_ATTR
        n = len(fed_positions)
        appended = {}
        for i, (k, v, held) in enumerate(layers):
            if held[len(held) - n:] != list(fed_positions):
                raise llama_state.StateError(
                    "swa cell_count", f"the step fed {n} tokens (positions {fed_positions[0]} to "
                    f"{fed_positions[-1]}) but layer {i}'s cache holds {len(held)} cells: llama.cpp keeps only the "
                    f"sliding window's ({window}) rows, so a step feeding more than the window leaves no record "
                    "of its first tokens on the sliding layers (feed the prompt in chunks of the window)")
            appended[i] = (k[:, :, len(held) - n:], v[:, :, len(held) - n:])
        setattr(self, APPENDED_ATTR, appended)
        self.logical_lengths = [max(len(h) for _, _, h in layers)] * len(layers)
        self.layers = [SimpleNamespace(keys=k, values=v) for k, v, _ in layers]


def _coarseness(cache_type: str) -> int:
    return {"f32": 0, "f16": 1, "bf16": 2, "q8_0": 3, "q4_0": 4}[cache_type]


def add_arguments(ap) -> None:
    g = ap.add_argument_group("--engine llama.cpp")
    g.add_argument("--cache-type-k", default="f16", choices=tuple(llama_state.CACHE_TYPE_IDS),
                   help="llama.cpp's K cache type (-ctk; default f16)")
    g.add_argument("--cache-type-v", default="f16", choices=tuple(llama_state.CACHE_TYPE_IDS),
                   help="llama.cpp's V cache type (-ctv; a quantised one needs --flash-attn on)")
    g.add_argument("--flash-attn", default="auto", choices=("auto", "on", "off"))
    g.add_argument("--threads", type=int, default=1)


def record(args, policy: Dict[str, Any]) -> int:
    """kvscope-record --engine llama.cpp."""
    from .hf_trace import TraceRecorder, decode

    if not args.model.endswith(".gguf") or not os.path.isfile(args.model):
        raise SystemExit(f"kvscope-record: --engine llama.cpp runs a .gguf file, not {args.model}")
    if args.uncached:
        raise SystemExit("kvscope-record: --uncached is transformers' reference; llama.cpp records "
                         "its cached run (the audit recomputes the reference)")
    prompts: List[Tuple[List[int], str]] = [([int(x) for x in s.split(",") if x.strip()], "")
                                            for s in args.prompt_ids]
    n_ctx = max([len(p) for p, _ in prompts] + [len(t) * 4 + 8 for t in args.prompt]) + args.max_new + 1
    s = LlamaCppSession(args.model, n_ctx, args.cache_type_k, args.cache_type_v, args.flash_attn,
                        args.threads)
    prompts = [(s.tokenize(t), t) for t in args.prompt] + prompts
    info = s.model_info(args.model, fingerprint=not args.no_fingerprint)
    store = "F16" if s.cache_types == ("f16", "f16") else args.store
    if s.swa is not None and args.snapshots:
        raise SystemExit("kvscope-record: --snapshots needs every row of each layer; llama.cpp's sliding "
                         f"layers ({args.model}: an iswa cache) keep only their window's")
    # a sliding layer's checksum would cover the rows its window kept, not the whole cache
    rec = TraceRecorder(info, engine=s.engine_name(), snapshots=args.snapshots, dtype=store,
                        checksums=s.swa is None)
    s.declare_cache(rec.writer)
    last: List[int] = []
    # An iswa model's sliding layers hold only their window's rows after a step: a longer prompt
    # is fed a window at a time (chunked prefill), so each chunk's rows are read while held.
    chunk = s.n_swa if s.swa is not None else 0
    for rid, (ids, text) in enumerate(prompts):
        out = decode(s.forward, rec, rid, ids, args.max_new, policy, eos_ids=s.eos_ids(),
                     stop_at_eos=not args.ignore_eos, max_positions=info["max_positions"],
                     prompt_text=text, prefill_chunk=chunk)
        last = ids + out[:-1]  # what the cache holds: the last chosen token was never fed
        print(f"request {rid}: {len(ids)} prompt tokens -> {out}")
    rec.save(args.out)
    print(f"wrote {args.out}")
    if args.save_state:
        s.save_state(args.save_state, last)
        print(f"wrote {args.save_state}")
    return 0
