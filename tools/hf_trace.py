#!/usr/bin/env python3
"""`kvscope-record` (record a trace from a transformers causal LM) from a checkout.

The implementation is kvscope_trace.hf_trace in python/ (`pip install ./python[record]`
gives the `kvscope-record` command); this wrapper runs that source. Options: --help.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kvscope_trace.hf_trace import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
