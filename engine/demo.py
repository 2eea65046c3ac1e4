"""`python -m engine.demo`: a short generation on the built-in default checkpoint.

Writes the default checkpoint on first use (seconds, no download), generates for two
prompts and prints the text and the decode speed.
"""

from __future__ import annotations

import sys


def main() -> int:
    from engine import LLM, SamplingParams

    llm = LLM()
    params = SamplingParams(max_tokens=48, temperature=0.8, top_p=0.95, seed=0, ignore_eos=True)
    prompts = ["Hello, tokdrift!", "def fibonacci(n):"]
    for out in llm.generate(prompts, params):
        tps = len(out.token_ids) / out.decode_time_s if out.decode_time_s else float("nan")
        print(f"> {out.prompt}\n{out.text!r}\n  {len(out.prompt_token_ids)} prompt tokens, "
              f"{len(out.token_ids)} generated, decode {tps:.1f} tok/s")
    print(f"checkpoint: {llm.checkpoint} (random weights: the text is noise; the engine is real)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
