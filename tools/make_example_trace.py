#!/usr/bin/env python3
"""The example trace with known values (kvscope_trace.example) from a checkout; the C++
test tests/core/PythonTraceTest.cpp runs it.

    python3 tools/make_example_trace.py OUT.kvtrace [--snapshots-only] [--snapshots] [--dtype F16]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kvscope_trace.example import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
