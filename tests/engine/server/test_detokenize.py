"""Streamed text: whole characters only, never a stop string, and the same text as decoding at once."""

import random

from engine.server.chat import ChatMessage, message_text, render_chat
from engine.server.detokenize import TextStream
from engine.tokenizer import ByteTokenizer, Tokenizer

BYTES = ByteTokenizer(272)


def stream_all(stream: TextStream, ids, chunk=1):
    pieces = [stream.push(ids[i : i + chunk]) for i in range(0, len(ids), chunk)]
    return pieces + [stream.finish()]


def test_multibyte_characters_never_split():
    text = "naïve 日本語 🙂 done"
    ids = BYTES.encode(text)
    pieces = stream_all(TextStream(BYTES), ids)
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert "🙂" in pieces  # four byte-tokens, handed out once complete


def test_random_bytes_decode_as_a_whole():
    rng = random.Random(0)
    for _ in range(50):
        ids = [rng.randrange(259) for _ in range(rng.randint(1, 60))]
        chunk = rng.randint(1, 5)
        got = "".join(stream_all(TextStream(BYTES, stop_ids={256}), ids, chunk))
        assert got == BYTES.decode([t for t in ids if t != 256])


def test_stop_string_never_streamed_even_in_part():
    ids = BYTES.encode("hello ENDworld")
    stream = TextStream(BYTES, stop=("END",))
    pieces = stream_all(stream, ids)
    assert "".join(pieces) == "hello "
    assert not any("E" in p for p in pieces)


def test_text_that_only_looked_like_a_stop_string_is_released():
    pieces = stream_all(TextStream(BYTES, stop=("END",)), BYTES.encode("an ENdless ENtry"))
    assert "".join(pieces) == "an ENdless ENtry"
    assert "ENd" in "".join(pieces[:-1])  # released as soon as 'd' ruled the stop string out


def test_earliest_of_several_stop_strings_wins():
    pieces = stream_all(TextStream(BYTES, stop=("zz", "y")), BYTES.encode("abc y zz"))
    assert "".join(pieces) == "abc "


class WordTokenizer(Tokenizer):
    """Ids are indexes into a list of byte strings; a character can span two ids."""

    pieces = [b"Hi", b" there", b"\xe6\x97", b"\xa5", b"!", b"<eos>"]
    eos_token_ids = (5,)

    def encode(self, text):
        raise NotImplementedError

    def decode(self, ids):
        return b"".join(self.pieces[i] for i in ids if i != 5).decode("utf-8", errors="replace")


def test_window_decoder_holds_a_split_character():
    stream = TextStream(WordTokenizer(), stop_ids={5})
    assert stream.push([0, 1]) == "Hi there"
    assert stream.push([2]) == ""  # half of 日
    assert stream.push([3]) == "日"
    assert stream.push([4, 5]) == "!"
    assert stream.finish() == ""


def test_chat_template_uses_the_special_ids():
    ids = render_chat([ChatMessage("system", "be brief"), ChatMessage("user", "hi")], BYTES)
    start, end = BYTES.special_ids["<|im_start|>"], BYTES.special_ids["<|im_end|>"]
    assert ids.count(start) == 3 and ids.count(end) == 2
    assert ids[-len("assistant\n") - 1 :] == [start] + BYTES.encode("assistant\n")
    assert BYTES.decode(ids) == "system\nbe brief\nuser\nhi\nassistant\n"


def test_message_text_joins_parts_and_keeps_tool_calls():
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    text = message_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], [call])
    assert text.startswith("ab\n<tool_call>\n") and '"name":"ls"' in text
    assert message_text(None) == ""
