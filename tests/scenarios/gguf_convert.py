"""Runs llama.cpp's own convert_hf_to_gguf.py (the copy scripts/live-python.sh --llama-cpp
fetched) on a checkpoint: `python gguf_convert.py LLAMA_CPP_DIR MODEL_DIR --outtype T --outfile F`.

One thing is patched, for the test checkpoints only: llama.cpp names a BPE tokenizer's
pre-tokenizer by the hash of how it encodes a test text and refuses a vocabulary it has not
seen; the tiny test vocabularies are none it has seen, so an unknown hash is written as
"default", or as $KVSCOPE_GGUF_PRE where a test names the family the vocabulary imitates.
Everything else (the metadata, tensor names, q/k permutation, dtypes and quantisation) is
the converter's own.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def convert(llama_cpp: str, model: str, outtype: str, out: str, pre: str = "") -> None:
    """Converts `model` to `out` in a process of its own (the converter patches modules and
    parses sys.argv); `llama_cpp` is the folder holding convert_hf_to_gguf.py. Raises
    AssertionError with the converter's own message when it fails."""
    env = dict(os.environ, KVSCOPE_GGUF_PRE=pre) if pre else dict(os.environ)
    r = subprocess.run([sys.executable, os.path.join(HERE, "gguf_convert.py"), llama_cpp, model, "--outtype",
                        outtype, "--outfile", out], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise AssertionError(f"convert_hf_to_gguf.py {model} {outtype}: {r.stderr[-2000:]}")


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
            # KVSCOPE_GGUF_PRE: the name the converter gives the real tokenizer this test
            # vocabulary was trained like (llama-bpe, qwen2, gpt-2), to test that pre-tokenizer.
            return os.environ.get("KVSCOPE_GGUF_PRE", "default")

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    import convert_hf_to_gguf
    sys.argv = [os.path.join(llama_cpp, "convert_hf_to_gguf.py")] + sys.argv[2:]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
