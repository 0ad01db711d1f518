"""The one table of the live engine suites (issue 29's "engine x family x run"): every
test_live_*.py module notes its rows here, and they are printed per module at its end; with
KVSCOPE_ENGINE_TABLE set (CTest sets it for the live tests) each row is also appended to that
file, and `python3 engine_table.py FILE` prints the rows of every engine that ran, as one table.

A row: engine (with its version), family, run, expected (a finding id, or clean), got (the
finding ids, clean, or an exit code), where (request/step/layer/position of the first finding).
"""

from __future__ import annotations

import os
import sys
from typing import List, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import foreign_runs as fr  # noqa: E402

HEAD = ["engine", "family", "run", "expected", "got", "request/step/layer/position"]


def table(rows: List[Sequence[str]]) -> str:
    """The rows under the header, as foreign_runs prints its tables."""
    return fr.table([HEAD] + [[str(c) for c in r] for r in rows])


def where(first) -> str:
    """request/step/layer/position of a first divergence ({"request": .., ...}), or "-"."""
    if not first:
        return "-"
    return "/".join(str(first.get(k)) for k in ("request", "step", "layer", "position"))


class EngineTable:
    """One module's rows."""

    def __init__(self, title: str):
        self.title, self.rows = title, []

    def add(self, engine: str, family: str, run: str, expected: str, got: str, where: str) -> None:
        row = [str(x).replace("\t", " ").replace("\n", " ") for x in (engine, family, run, expected, got, where)]
        self.rows.append(row)
        path = os.environ.get("KVSCOPE_ENGINE_TABLE")
        if path:
            with open(path, "a") as f:  # one short line per write: the modules run side by side
                f.write("\t".join(row) + "\n")

    def print_and_clear(self) -> None:
        if self.rows:
            print(f"\n{self.title}:\n" + table(self.rows))
        self.rows = []


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print("usage: engine_table.py FILE", file=sys.stderr)
        return 2
    if not os.path.exists(argv[1]):
        print("not checked: no live engine suite ran (no rows in " + argv[1] + ")")
        return 0
    with open(argv[1]) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    bad = [r for r in rows if len(r) != len(HEAD)]
    if bad:
        print(f"{argv[1]}: a row of {len(bad[0])} cells, expected {len(HEAD)}: {bad[0]}", file=sys.stderr)
        return 1
    engines = sorted({r[0].split(" ")[0] for r in rows})
    print(f"The live engines under audit ({', '.join(engines)}; {len(rows)} runs):\n" +
          table(sorted(rows, key=lambda r: r[0].split(" ")[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
