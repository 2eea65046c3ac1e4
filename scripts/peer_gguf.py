"""llama.cpp's own `convert_hf_to_gguf.py`, run on the peer checkpoint, told its pre-tokenizer.

    python scripts/peer_gguf.py LLAMA_CPP_SRC HF_DIR --outtype f32 --outfile OUT.gguf

The converter names a BPE tokenizer's pre-tokenizer by hashing the ids it gives a fixed text
and looking the hash up in a table of published models; a tokenizer trained here is in no
table, so the converter stops. Ours uses Qwen2's split regex and byte-level mapping
(scripts/peer_checkpoint.py), which llama.cpp calls "qwen2": this names it and changes
nothing else. It also lets the converter find no `tokenizer.model` without the `sentencepiece`
package (the converter imports it before looking for the file). Every other argument goes to the converter's own main().

It works with the converter of every llama-cpp-python release from 0.3.1 on: recent sources
keep the model classes in a `conversion` package (`conversion.base.TextModel`), older ones in
the script itself (`TextModel` from mid-2025, `Model` before). Sources of late 2025 (0.3.16)
import `mistral_common` at the top of the script for Mistral models only, and those of 2024
(0.3.1, 0.3.2) import `sentencepiece` at the top of `gguf-py`; where either package is not
installed it is replaced by an empty stand-in (nothing of it is used for this checkpoint).
gguf-py of 2024 also reads merges only in their old string form: a merges.txt is written beside
the checkpoint's tokenizer.json for it. Converters that load the config through transformers
(0.3.14, 0.3.16) are given rope_theta from transformers 5's rope_parameters.
The converter's own `gguf-py` is put first on the path, so each source writes its own GGUF.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path


class _Stub(types.ModuleType):
    """A module whose every public attribute is an empty class (names imported, never used)."""

    __path__: list[str] = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, prefix: str):
        self.prefix = prefix

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.prefix or fullname.startswith(self.prefix + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        pass


def _patch(cls) -> None:
    published = cls.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer) -> str:
        try:
            return published(self, tokenizer)
        except NotImplementedError:
            return "qwen2"

    cls.get_vocab_base_pre = get_vocab_base_pre
    sentencepiece_vocab = cls._create_vocab_sentencepiece

    def _create_vocab_sentencepiece(self):
        if not (self.dir_model / "tokenizer.model").is_file():
            raise FileNotFoundError(self.dir_model / "tokenizer.model")
        return sentencepiece_vocab(self)

    cls._create_vocab_sentencepiece = _create_vocab_sentencepiece


def _patch_hparams(cls) -> None:
    """transformers 5 keeps rope_theta only in rope_parameters; converters of mid-2025 (0.3.14,
    0.3.16) read the config through AutoConfig and then look for rope_theta at the top level."""
    load = getattr(cls, "load_hparams", None)
    if load is None:
        return

    def load_hparams(*args, **kwargs):
        config = load(*args, **kwargs)
        rope = config.get("rope_parameters")
        if "rope_theta" not in config and isinstance(rope, dict) and "rope_theta" in rope:
            config["rope_theta"] = rope["rope_theta"]
        return config

    cls.load_hparams = staticmethod(load_hparams)


def _write_merges_txt(hf: Path) -> None:
    """gguf-py of 2024 (0.3.1) reads tokenizer.json's merges only as "a b" strings, while
    `tokenizers` now saves them as ["a", "b"] pairs; it falls back to a merges.txt beside it,
    which this writes once (byte-level tokens have no spaces). Later converters ignore it."""
    import json

    merges_txt, tokenizer_json = hf / "merges.txt", hf / "tokenizer.json"
    if merges_txt.exists() or not tokenizer_json.is_file():
        return
    merges = json.loads(tokenizer_json.read_text(encoding="utf-8")).get("model", {}).get("merges") or []
    if merges and not isinstance(merges[0], str):
        lines = ["#version: 0.2"] + [" ".join(pair) for pair in merges]
        merges_txt.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    src = Path(sys.argv[1]).resolve()
    if len(sys.argv) > 2 and Path(sys.argv[2]).is_dir():
        _write_merges_txt(Path(sys.argv[2]))
    sys.path[:0] = [str(src), str(src / "gguf-py")]
    script = src / "convert_hf_to_gguf.py"
    sys.argv = [str(script), *sys.argv[2:]]

    # Sources of 2024 (0.3.1, 0.3.2) import sentencepiece at the top of gguf-py's vocab.py; the
    # checkpoint has no tokenizer.model, so a stand-in is enough where the package is missing.
    if importlib.util.find_spec("sentencepiece") is None:
        sys.meta_path.append(_StubFinder("sentencepiece"))
    import gguf  # noqa: F401  the source's own gguf-py, before the mistral_common stand-in exists

    if importlib.util.find_spec("mistral_common") is None:
        sys.meta_path.append(_StubFinder("mistral_common"))

    if (src / "conversion" / "base.py").is_file():  # the model classes in a package
        import conversion.base as base

        _patch(base.TextModel)
        import runpy

        runpy.run_path(str(script), run_name="__main__")
        return

    # One script: import it as a module (its main() does not run), patch, then call main().
    spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["convert_hf_to_gguf"] = module
    spec.loader.exec_module(module)
    _patch(getattr(module, "TextModel", None) or module.Model)
    _patch_hparams(getattr(module, "ModelBase", None) or module.Model)
    module.main()


if __name__ == "__main__":
    main()
