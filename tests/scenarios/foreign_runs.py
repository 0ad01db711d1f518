"""Runs KV Scope's audit (kvscope-cli) on traces it did not record, and compares the verdict
with what the run is known to hold.

Two sources, neither of them KV Scope's engine:
- the transformers-recorded bug scenarios of tests/fixtures/hf/scenarios, converted the way a
  user would (scenario_to_trace.py);
- the independent PyTorch engine of tests/independent (its own loader, forward, cache object,
  torch.multinomial sampling), with each bug patched in the way engines have them.

An `Expectation` says which root findings (ids, drift excluded, consequences linked with
caused_by excluded) a run must give, and where the first divergence is. `Outcome` is what
the audit said; `Outcome.problems` lists the differences. The test module prints every row
as one table.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def cli_path() -> str:
    """kvscope-cli: $KVSCOPE_CLI (CTest sets it) or the default build folder."""
    return os.environ.get("KVSCOPE_CLI") or os.path.join(REPO, "build", "app", "cli", "kvscope-cli")


@dataclass
class Expectation:
    findings: Sequence[str] = ()          # root finding ids (drift never counts)
    first_step: Optional[int] = None      # None: not defined for this run (not compared)
    first_layer: Optional[int] = None
    first_request: int = 0


@dataclass
class Outcome:
    exit_code: int
    verdict: str = ""
    roots: List[str] = field(default_factory=list)
    consequences: List[str] = field(default_factory=list)
    first: Optional[Dict[str, int]] = None
    report: Dict = field(default_factory=dict)
    error: str = ""

    def problems(self, e: Expectation) -> List[str]:
        if self.error:
            return [self.error]
        out = []
        if sorted(set(self.roots)) != sorted(set(e.findings)):
            out.append(f"findings {sorted(set(self.roots))} != expected {sorted(set(e.findings))}")
        want_exit = 1 if e.findings else 0
        if self.exit_code != want_exit:
            out.append(f"exit {self.exit_code} != {want_exit}")
        if e.first_step is not None:
            got = (self.first or {}).get("step")
            if got != e.first_step or (self.first or {}).get("request") != e.first_request:
                out.append(f"first divergence {self.first} != request {e.first_request} step {e.first_step}")
        if e.first_layer is not None and (self.first or {}).get("layer") != e.first_layer:
            out.append(f"first layer {(self.first or {}).get('layer')} != {e.first_layer}")
        return out

    def where(self) -> str:
        if not self.first:
            return "-"
        return f"s{self.first['step']} L{self.first['layer']}"


def audit(trace: str, model: Optional[str] = None, reference_trace: Optional[str] = None,
          extra: Sequence[str] = ()) -> Outcome:
    """kvscope-cli audit --json on one trace (model+trace, or trace+trace)."""
    cmd = [cli_path(), "audit", "--trace", trace, "--json", *extra]
    if model:
        cmd += ["--model", model]
    if reference_trace:
        cmd += ["--reference-trace", reference_trace]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode not in (0, 1):
        return Outcome(p.returncode, error=f"exit {p.returncode}: {p.stderr.strip()[:300]}")
    try:
        rep = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        return Outcome(p.returncode, error=f"no JSON report ({e})")
    real = [f for f in rep["findings"] if f["id"] != "drift"]
    return Outcome(p.returncode, rep["verdict"], [f["id"] for f in real if not f.get("caused_by")],
                   [f["id"] for f in real if f.get("caused_by")], rep.get("first_divergence"), rep)


# The scenario JSON names the diagnosis in the failure matrix's words; these are the ids.
DIAGNOSIS_IDS = {
    "none": [],
    "wrong-layer cache reuse": ["wrong_layer"],
    "cross-request cache contamination": ["cross_request"],
    "duplicate append or duplicated prompt token": ["duplicate_append"],
    "position index or token ownership": ["position"],
    "stale projected K/V": ["stale_cache"],
    "policy or tie rule": ["tie_rule"],
    "seed and RNG call order": ["rng_order"],
    "context limit reached": ["context_limit"],
}


def scenario_expectation(doc: Dict) -> Expectation:
    d = doc["expect"]["diagnosis"]
    ids: List[str] = []
    for name in (d if isinstance(d, list) else [d]):
        ids += DIAGNOSIS_IDS[name]
    return Expectation(ids, doc["expect"].get("first_step"), doc["expect"].get("first_layer"))


def table(rows: List[List[str]]) -> str:
    """A plain text table, columns padded to their widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
