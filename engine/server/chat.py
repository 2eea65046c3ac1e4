"""The chat template: OpenAI messages -> prompt token ids, in ChatML.

    <|im_start|>system\nYou are ...<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n

The byte tokenizer encodes text byte by byte, so `<|im_start|>` written as text would be
twelve bytes, not the special token: the specials go in by id. A checkpoint tokenizer
(`tokenizer.json`) turns the special strings into their ids itself.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from engine.tokenizer import ByteTokenizer, Tokenizer

IM_START, IM_END = "<|im_start|>", "<|im_end|>"


class ChatMessage(NamedTuple):
    role: str
    content: str  # text parts joined; tool calls of an assistant turn appended as JSON


def render_chat(messages: list[ChatMessage], tokenizer: Tokenizer) -> list[int]:
    """ChatML prompt ids ending with the open assistant turn."""
    start, end = _special(tokenizer, IM_START), _special(tokenizer, IM_END)
    ids: list[int] = []
    for message in messages:
        ids += start + tokenizer.encode(f"{message.role}\n{message.content}") + end + tokenizer.encode("\n")
    return ids + start + tokenizer.encode("assistant\n")


def message_text(content: str | list[dict[str, Any]] | None, tool_calls: list[dict[str, Any]] | None = None) -> str:
    """A message's `content` (a string, None, or a list of text parts) as one string."""
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = "".join(part["text"] for part in content)
    if tool_calls:
        text += "".join(
            "\n<tool_call>\n" + json.dumps(call, separators=(",", ":")) + "\n</tool_call>" for call in tool_calls
        )
    return text


def _special(tokenizer: Tokenizer, name: str) -> list[int]:
    if isinstance(tokenizer, ByteTokenizer):
        if name not in tokenizer.special_ids:
            return tokenizer.encode(name)  # a vocabulary without the specials: spell it out
        return [tokenizer.special_ids[name]]
    return tokenizer.encode(name)
