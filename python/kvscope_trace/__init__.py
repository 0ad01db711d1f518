"""kvscope-trace: read, write and record KV Scope traces (`.kvtrace`) with numpy alone.

    import kvscope_trace as kt
    w = kt.TraceWriter(model={"architecture": "llama", "num_layers": 3, "num_kv_heads": 2,
                              "head_dim": 16, "vocab_size": 1200, "max_positions": 128})
    w.add_request(0, prompt_ids=[0, 34, 86], generated=[422], max_new_tokens=1)
    w.add_step(request=0, step=0, fed_ids=[0, 34, 86], positions=[0, 1, 2], chosen=422,
               logits=row, keys=[k0, k1, k2], values=[v0, v1, v2])
    w.save("run.kvtrace")
    t = kt.read_trace("run.kvtrace")     # validated like kvscope-cli's reader (TraceError)

Modules: `trace` (data model, reader, writer), `hf_trace` (record any transformers causal
LM: TraceRecorder, decode; `kvscope-record`), `cli` (`kvtrace info|roundtrip|fingerprint`),
`example` (a trace with known values), `hf_recording` (`recording(model, path)`: a context
manager that records every `model.generate(...)` in its block). The format: docs/trace-format.md in KV Scope; the
C++ reader of `kvscope-cli` is the judge of it.
"""

__version__ = "0.1.0"

from .container import STORE_DTYPES, TraceError  # noqa: E402,F401
from .trace import (FORMAT_VERSION, LayerRecord, Step, Trace, TraceWriter,  # noqa: E402,F401
                    cache_checksum, document, model_fingerprint, model_stored_dtype,
                    normalize_policy, parse_document, read_trace, write_trace)
from .hf_recording import recording  # noqa: E402,F401  (imports torch only when used)

__all__ = ["STORE_DTYPES", "TraceError", "FORMAT_VERSION", "LayerRecord", "Step", "Trace", "TraceWriter",
           "cache_checksum", "document", "model_fingerprint", "model_stored_dtype", "normalize_policy",
           "parse_document", "read_trace", "recording", "write_trace", "__version__"]
