"""`python3 -m kvscope_trace info|roundtrip|fingerprint ...`, the same as `kvtrace`."""
import sys

from .cli import main

sys.exit(main())
