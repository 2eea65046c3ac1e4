"""llama.cpp's own `convert_hf_to_gguf.py`, run on the peer checkpoint, told its pre-tokenizer.

    python scripts/peer_gguf.py LLAMA_CPP_SRC HF_DIR --outtype f32 --outfile OUT.gguf

The converter names a BPE tokenizer's pre-tokenizer by hashing the ids it gives a fixed text
and looking the hash up in a table of published models; a tokenizer trained here is in no
table, so the converter stops. Ours uses Qwen2's split regex and byte-level mapping
(scripts/peer_checkpoint.py), which llama.cpp calls "qwen2": this names it and changes
nothing else. It also lets the converter find no `tokenizer.model` without the `sentencepiece`
package (the converter imports it before looking for the file). Every other argument goes to the converter's own main().
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    src = Path(sys.argv[1]).resolve()
    sys.path[:0] = [str(src), str(src / "gguf-py")]
    sys.argv = [str(src / "convert_hf_to_gguf.py"), *sys.argv[2:]]

    import conversion.base as base

    published = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer) -> str:
        try:
            return published(self, tokenizer)
        except NotImplementedError:
            return "qwen2"

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    sentencepiece_vocab = base.TextModel._create_vocab_sentencepiece

    def _create_vocab_sentencepiece(self):
        if not (self.dir_model / "tokenizer.model").is_file():
            raise FileNotFoundError(self.dir_model / "tokenizer.model")
        return sentencepiece_vocab(self)

    base.TextModel._create_vocab_sentencepiece = _create_vocab_sentencepiece
    import runpy

    runpy.run_path(str(src / "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
