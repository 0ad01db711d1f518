#!/usr/bin/env python3
"""Mutated-input sweep through kvscope-cli (issue 12).

Damages copies of a demo checkpoint (model.safetensors, config.json,
generation_config.json, tokenizer.json) and of a recorded trace (bytes, truncation, the
JSON document's fields, deeply nested JSON) and runs `reference` / `audit` on each. Every
run must end with exit 0, 1 or 2 - no signal, no time-out, no LibTorch stack dump or
sanitizer report - and a refusal (exit 2) must name the damaged file. The damaged file
must be byte-identical afterwards.

    python3 tests/fuzz/sweep_cli.py --cli build/app/cli/kvscope-cli [--runs N] [--seed S]
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

BAD_OUTPUT = ("Exception raised from", "frame #", "terminate called", "AddressSanitizer",
              "runtime error:", "Segmentation fault", "core dumped", "c10::Error")
HOSTILE_VALUES = [None, -1, 0, 2**31, 2**63 - 1, 2**64 - 1, -2**63, 1e300, -1e300, 0.5, "x" * 300,
                  "\u00e9\u2581", [], {}, [1, [2, [3]]], True, 10**12]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def deep(depth):
    return "[" * depth + "]" * depth


def read_header(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path, header, data, header_text=None):
    text = header_text if header_text is not None else json.dumps(header)
    hb = text.encode("utf-8", "surrogateescape")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)


def leaf_paths(value, prefix=()):
    """Every (path, value) of a JSON value, containers included."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaf_paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:8]):
            yield from leaf_paths(v, prefix + (i,))


def set_path(doc, path, value):
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value


def mutate_json_text(rng, text):
    """A damaged JSON document: a field set to a hostile value, deep nesting, or bytes."""
    kind = rng.random()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if doc is not None and kind < 0.55:
        paths = [p for p, _ in leaf_paths(doc) if p]
        path = rng.choice(paths)
        if rng.random() < 0.15:
            set_path(doc, path, "@@DEEP@@")
            return json.dumps(doc).replace('"@@DEEP@@"', deep(rng.choice([129, 5000, 100000])))
        set_path(doc, path, rng.choice(HOSTILE_VALUES))
        return json.dumps(doc)
    if doc is not None and kind < 0.65 and isinstance(doc, dict):
        doc.pop(rng.choice(list(doc)), None)
        return json.dumps(doc)
    b = bytearray(text.encode("utf-8", "surrogateescape"))
    if kind < 0.8 and b:
        b = b[:rng.randrange(len(b))]
    else:
        for _ in range(rng.randint(1, 8)):
            if b:
                b[rng.randrange(len(b))] = rng.choice([0, 0x22, 0x5B, 0x7B, 0x7D, 0xFF, 0xC3, 0x80, rng.randrange(256)])
    return b.decode("utf-8", "surrogateescape")


def mutate_bytes(rng, raw):
    b = bytearray(raw)
    kind = rng.random()
    if kind < 0.3:
        return bytes(b[:rng.randrange(len(b))])
    n = struct.unpack("<Q", raw[:8])[0]
    for _ in range(rng.randint(1, 6)):
        # mostly the header, where the structure is
        pos = rng.randrange(min(len(b), 8 + n + 64)) if rng.random() < 0.8 else rng.randrange(len(b))
        b[pos] = rng.randrange(256)
    return bytes(b)


class Sweep:
    def __init__(self, cli, work, rng, timeout):
        self.cli, self.work, self.rng, self.timeout = cli, work, rng, timeout
        self.runs, self.failures, self.exits = 0, [], {0: 0, 1: 0, 2: 0}

    def run(self, args, damaged, what):
        before = digest(damaged)
        t0 = time.time()
        try:
            p = subprocess.run([self.cli] + args, capture_output=True, text=True, errors="replace",
                               timeout=self.timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
        except subprocess.TimeoutExpired:
            self.failures.append(f"{what}: time-out after {self.timeout} s: {args}")
            return
        self.runs += 1
        out = p.stdout + p.stderr
        problem = None
        if p.returncode < 0:
            problem = f"signal {-p.returncode}"
        elif p.returncode not in (0, 1, 2):
            problem = f"exit {p.returncode}"
        elif any(s in out for s in BAD_OUTPUT):
            problem = "library stack dump or sanitizer report in the output"
        elif p.returncode == 2 and os.path.basename(damaged) not in p.stderr and damaged not in p.stderr:
            problem = "exit 2 without naming the damaged file"
        if digest(damaged) != before:
            problem = "the damaged input was modified"
        if problem is None:
            self.exits[p.returncode] += 1
            return
        keep = os.path.join(self.work, f"failure-{len(self.failures)}-{os.path.basename(damaged)}")
        shutil.copy(damaged, keep)
        self.failures.append(f"{what}: {problem} ({time.time() - t0:.1f} s) kept {keep}\n"
                             f"  args: {args}\n  stderr: {p.stderr.strip()[-600:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--runs", type=int, default=60, help="damaged inputs per kind")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="kvscope-sweep-")
    try:
        return sweep_all(a, rng, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def sweep_all(a, rng, work):
    cli = os.path.abspath(a.cli)
    model = os.path.join(work, "model")
    subprocess.run([cli, "make-demo", model], check=True, capture_output=True)
    trace = os.path.join(work, "run.kvtrace")
    subprocess.run([cli, "generate", "--model", model, "--prompt", "Hello", "--max-new", "3", "--snapshots",
                    "--trace", trace], check=True, capture_output=True)
    sweep = Sweep(cli, work, rng, a.timeout)
    files = ["config.json", "generation_config.json", "tokenizer.json", "model.safetensors"]

    for i in range(a.runs):
        # a damaged copy of the checkpoint: one file changed
        name = files[i % len(files)]
        d = os.path.join(work, f"ckpt-{i}")
        shutil.copytree(model, d)
        path = os.path.join(d, name)
        if name == "model.safetensors":
            header, data = read_header(path)
            if rng.random() < 0.5:
                with open(path, "wb") as f:
                    f.write(mutate_bytes(rng, open(os.path.join(model, name), "rb").read()))
            else:
                write_safetensors(path, None, data, mutate_json_text(rng, json.dumps(header)))
        else:
            with open(os.path.join(model, name), encoding="utf-8") as f:
                text = f.read()
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(mutate_json_text(rng, text))
        sweep.run(["reference", "--model", d, "--prompt", "Hello world"], path, f"checkpoint {name} #{i}")
        shutil.rmtree(d)

        # a damaged copy of the trace: bytes, or the JSON document inside
        t = os.path.join(work, f"trace-{i}.kvtrace")
        header, data = read_header(trace)
        if rng.random() < 0.35:
            with open(t, "wb") as f:
                f.write(mutate_bytes(rng, open(trace, "rb").read()))
        else:
            header["__metadata__"]["kvtrace"] = mutate_json_text(rng, header["__metadata__"]["kvtrace"])
            write_safetensors(t, header, data)
        if i % 2 == 0:
            sweep.run(["audit", "--model", model, "--trace", t], t, f"trace #{i} against the model")
        else:
            sweep.run(["audit", "--reference-trace", trace, "--trace", t], t, f"trace #{i} against a trace")
        os.remove(t)

    print(f"{sweep.runs} runs: exit 0 x{sweep.exits[0]}, exit 1 x{sweep.exits[1]}, exit 2 x{sweep.exits[2]}; "
          f"{len(sweep.failures)} failures")
    for f in sweep.failures:
        print("FAIL", f)
    if not sweep.failures and not a.keep:
        shutil.rmtree(work)
    return 1 if sweep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
