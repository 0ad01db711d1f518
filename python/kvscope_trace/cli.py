"""The `kvtrace` command: summaries, validating round trips and model fingerprints.

    kvtrace info FILE              summary of a trace
    kvtrace roundtrip IN OUT       read, validate and write again as version 2 (F32
                                   unless --dtype); rewrites version-1 files
    kvtrace fingerprint MODEL_DIR  the model fingerprint KV Scope records

Also `python3 -m kvscope_trace ...`. Exit status 0, or 2 on an unreadable or invalid trace
(the message names the file and the field).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import __version__, layer_kinds
from .trace import FORMAT_VERSION, STORE_DTYPES, Trace, TraceError, model_fingerprint, read_trace, write_trace


def info(trace: Trace, path: str = "") -> str:
    m = trace.model
    old = " (read only; `kvtrace roundtrip` rewrites it as v2)" if trace.version < FORMAT_VERSION else ""
    out = [f"{path}: kvtrace v{trace.version}{old}, engine '{trace.engine}', mode {trace.mode}",
           f"model: {m.get('architecture') or '?'} layers={m['num_layers']} heads={m.get('num_heads', 0)} "
           f"kv_heads={m['num_kv_heads']} head_dim={m['head_dim']} "
           + (f"value_head_dim={m['value_head_dim']} " if m.get("value_head_dim") else "")
           + f"vocab={m['vocab_size']} "
           f"max_positions={m.get('max_positions', 0)} tensors={','.join(trace.stored_dtypes) or '-'}",
           f"fingerprint: {m.get('fingerprint') or '(unknown)'}",
           f"requests: {len(trace.requests)}, steps: {len(trace.steps)}, "
           f"snapshots: {'yes' if trace.has_snapshots() else 'no'}, "
           f"checksums: {'yes' if any(l.checksum_k for s in trace.steps for l in s.layers) else 'no'}, "
           f"events: {len(trace.events)}, faults: {len(trace.faults)}"]
    kv = trace.extra.get("kv_cache")
    if kv:
        out.append(f"kv cache: {kv['dtype']}, " + ("static scales per layer" if kv.get("scale") == "per_layer"
                                                  else "a scale per token and kv head"))
    rope = m.get("rope_parameters")
    if rope:
        out.append(f"rope scaling: {rope.get('rope_type', 'default')} factor {rope.get('factor', 1.0):g}"
                   + (f", original context {rope['original_max_position_embeddings']}"
                      if rope.get("original_max_position_embeddings") else ""))
    kinds = layer_kinds.parse_layer_kinds(trace.extra, path, m["num_layers"])
    if kinds and any(k["kind"] != "full" for k in kinds):
        maps = sum(1 for s in trace.steps if any(l.ring_positions is not None for l in s.layers))
        states = sum(1 for s in trace.steps if any(l.conv_state is not None for l in s.layers))
        recurrent = layer_kinds.recurrent_layers(kinds, trace.stored_layers())
        out.append("layer kinds: " + layer_kinds.describe(kinds)
                   + (f"; ring slot maps on {maps} steps" if layer_kinds.ring_slots(kinds) else "")
                   + (f"; recurrent states at {states} steps" if recurrent else ""))
    hits = [s for s in trace.steps if s.reused_count > 0]
    if hits:
        reused = sum(s.reused_count for s in hits)
        out.append(f"prefix cache: {len(hits)} hit{'s' if len(hits) != 1 else ''}, "
                   f"{reused} entr{'ies' if reused != 1 else 'y'} reused")
    if trace.recorded_layers is not None:
        out.append(f"recorded layers: {trace.recorded_layers} of {m['num_layers']}")
    for r in trace.requests:
        steps = trace.steps_of(r["id"])
        p = r["policy"]
        pol = "greedy" if p["temperature"] == 0 else (
            f"T={p['temperature']:g}" + (f" top-k={p['top_k']}" if p["top_k"] is not None else "")
            + (f" top-p={p['top_p']:g}" if p["top_p"] is not None else "") + f" seed={p['seed']}")
        # A chunked prefill: the leading steps that choose nothing, then the one that does.
        chunks = next((i for i, s in enumerate(steps) if s.chosen >= 0), 0)
        prefill = f", prefill in {chunks + 1} chunks" if chunks else ""
        hit = next((s for s in steps if s.reused_count > 0), None)
        if hit is not None:
            prefill += f", {hit.reused_count} prompt entries from the prefix cache" + (
                f" (request {hit.reused_from})" if hit.reused_from >= 0 else "")
        out.append(f"  request {r['id']}: prompt {len(r['prompt_ids'])} tokens, generated "
                   f"{len(r['generated'])} ({r['stop_reason']}), {pol}, {len(steps)} steps{prefill}")
        gen = r["generated"]
        if gen:
            out.append(f"    generated: {gen[:16]}{' ...' if len(gen) > 16 else ''}")
    floats = sum((s.logits.size if s.logits is not None else 0)
                 + sum((l.keys.size * 2 if l.keys is not None and not l.derived else 0)
                       + (l.cache_keys.size * 2 if l.cache_keys is not None else 0)
                       + (l.conv_state.size + l.recurrent_state.size if l.conv_state is not None else 0)
                       for l in s.layers)
                 for s in trace.steps)
    out.append(f"tensor values: {floats}")
    for e in trace.events:
        out.append(f"  event tick {e['tick']}: {e['kind']} {e.get('tensor', '')} {e.get('detail', '')}".rstrip())
    for f in trace.faults:
        out.append(f"  fault: {f}")
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="kvtrace", description="KV Scope trace files (.kvtrace)")
    ap.add_argument("--version", action="version", version=f"kvtrace (kvscope-trace {__version__})")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("info", help="print a summary of a trace")
    p.add_argument("file")
    p = sub.add_parser("roundtrip", help="read (validating) and write a trace again")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--dtype", choices=STORE_DTYPES, default="F32")
    p.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    p.add_argument("--snapshots-only", action="store_true",
                   help="drop appended records and checksums, keep full cache snapshots "
                        "(what an engine that can only dump past_key_values records)")
    p = sub.add_parser("fingerprint", help="the model fingerprint of a model directory")
    p.add_argument("directory")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "info":
            print(info(read_trace(args.file), args.file))
        elif args.cmd == "roundtrip":
            t = read_trace(args.input)
            if args.snapshots_only:
                if not t.has_snapshots():
                    raise TraceError(args.input, "cache_k", "--snapshots-only needs a trace with snapshots")
                for st in t.steps:
                    for rec in st.layers:
                        rec.keys = rec.values = None
                        rec.checksum_k = rec.checksum_v = None
            write_trace(t, args.output, dtype=args.dtype, overwrite=args.force)
            print(f"wrote {args.output}: {len(t.requests)} requests, {len(t.steps)} steps")
        elif args.cmd == "fingerprint":
            print(model_fingerprint(args.directory))
    except (TraceError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0

