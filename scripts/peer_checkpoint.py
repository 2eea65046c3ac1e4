"""A seeded random Qwen3 (or Qwen2) checkpoint with a real BPE tokenizer, made here without any download.

    python scripts/peer_checkpoint.py OUT_DIR [--seed 0] [--arch qwen3|qwen2]

The tokenizer is a byte-level BPE trained with the `tokenizers` library on this repository's
own docs and code, with Qwen2's pre-tokenizer (the same split regex and byte-level mapping), so
that llama.cpp's converter can label it `qwen2` (scripts/peer_gguf.py). The weights are
transformers' own initialisation of `Qwen3ForCausalLM` under `torch.manual_seed(seed)`: the
model is random, its timings are real.

`--arch qwen2` makes the same model as a `Qwen2ForCausalLM` (same sizes, head_dim 512/8 = 64,
plus Qwen2's q/k/v biases): llama.cpp has read Qwen2 since 2024, so every llama-cpp-python
release from 0.3.1 on loads it, while Qwen3 arrived in 2025. Its config.json also carries
`rope_theta` at the top level (transformers 5 writes it only inside `rope_parameters`, which
older converters do not read).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VOCAB_SIZE = 8192  # small: the embedding stays a small part of the weights
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen2's pre-tokenizer split (tokenizer.json of the Qwen2/Qwen3 family); llama.cpp's "qwen2" pre.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
MODEL = dict(  # ~30M parameters: about the size of the built-in engine's default checkpoint
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=4,  # grouped-query attention, as in the real Qwen3
    head_dim=64,
    max_position_embeddings=32768,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    vocab_size=VOCAB_SIZE,
)


def training_files() -> list[str]:
    """The repository's markdown and Python files, in a fixed order (the tokenizer is reproducible)."""
    files = sorted(
        p
        for p in REPO.rglob("*")
        if p.suffix in (".md", ".py") and ".venv" not in p.parts and ".git" not in p.parts and p.is_file()
    )
    return [str(p) for p in files]


def make_tokenizer(out: Path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIALS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train(training_files(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, unk_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arch", choices=("qwen3", "qwen2"), default="qwen3")
    args = parser.parse_args()

    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    args.out.mkdir(parents=True, exist_ok=True)
    fast = make_tokenizer(args.out)
    eos, pad = fast.convert_tokens_to_ids("<|im_end|>"), fast.convert_tokens_to_ids("<|endoftext|>")
    if args.arch == "qwen3":
        config_class, model_class, sizes = Qwen3Config, Qwen3ForCausalLM, MODEL
    else:  # Qwen2 has no head_dim setting: hidden_size / num_attention_heads, 64 here as well
        config_class, model_class = Qwen2Config, Qwen2ForCausalLM
        sizes = {k: v for k, v in MODEL.items() if k != "head_dim"}
    config = config_class(**sizes, eos_token_id=eos, pad_token_id=pad, bos_token_id=pad, torch_dtype="float32")
    torch.manual_seed(args.seed)
    model = model_class(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False)
    model.save_pretrained(args.out)
    # Older llama.cpp converters read rope_theta (and torch_dtype) at the top level only.
    config_path = args.out / "config.json"
    saved = json.loads(config_path.read_text())
    saved.setdefault("rope_theta", MODEL["rope_theta"])
    saved.setdefault("torch_dtype", "float32")
    config_path.write_text(json.dumps(saved, indent=2) + "\n")
    num_params = sum(p.numel() for p in model.parameters())
    (args.out / "tokdrift-peer.json").write_text(
        json.dumps({"seed": args.seed, "num_params": num_params, "arch": args.arch, "vocab_size": VOCAB_SIZE}, indent=1)
        + "\n"
    )
    print(f"{args.out}: {model_class.__name__}, {num_params / 1e6:.1f}M parameters, float32, seed {args.seed}")


if __name__ == "__main__":
    main()
