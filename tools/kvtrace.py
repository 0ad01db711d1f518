#!/usr/bin/env python3
"""`kvtrace info|roundtrip|fingerprint` from a checkout, without installing the package.

The implementation is the kvscope_trace package in python/ (`pip install ./python` gives
the `kvtrace` command and `import kvscope_trace`); this wrapper runs that source.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kvscope_trace.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
