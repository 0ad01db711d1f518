"""Runs llama.cpp's own convert_hf_to_gguf.py (the copy scripts/live-python.sh --llama-cpp
fetched) on a checkpoint: `python gguf_convert.py LLAMA_CPP_DIR MODEL_DIR --outtype T --outfile F`.

One thing is patched, for the test checkpoints only: llama.cpp names a BPE tokenizer's
pre-tokenizer by the hash of how it encodes a test text and refuses a vocabulary it has not
seen; the tiny test vocabularies are none it has seen, so an unknown hash is written as
"default" (which only llama.cpp's own tokenizer reads; KV Scope's runs give token ids).
Everything else (the metadata, tensor names, q/k permutation, dtypes and quantisation) is
the converter's own.
"""

import os
import sys


def main() -> None:
    llama_cpp = os.path.abspath(sys.argv[1])
    sys.path.insert(0, llama_cpp)
    sys.path.insert(1, os.path.join(llama_cpp, "gguf-py"))
    from conversion import base

    known = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer) -> str:
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            return "default"

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    import convert_hf_to_gguf
    sys.argv = [os.path.join(llama_cpp, "convert_hf_to_gguf.py")] + sys.argv[2:]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
