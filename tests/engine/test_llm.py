"""`from engine import LLM, SamplingParams` on the built-in default checkpoint, and `soak generate`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from engine import LLM, SamplingParams
from engine.errors import EngineError
from ground import TokdriftError


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokdrift-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKDRIFT_HOME", str(path))
        from engine.model.checkpoint import default_checkpoint

        default_checkpoint()
    return path


@pytest.fixture(scope="module")
def llm(home):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKDRIFT_HOME", str(home))
        return LLM()


GREEDY = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)


def test_generate_accepts_ids_and_strings(llm):
    outs = llm.generate([[1, 2, 3], "hello"], SamplingParams(max_tokens=5, temperature=0, ignore_eos=True))
    assert [o.prompt_token_ids for o in outs] == [[1, 2, 3], list(b"hello")]
    assert [len(o.token_ids) for o in outs] == [5, 5]
    assert all(o.finish_reason == "length" for o in outs)
    assert outs[1].prompt == "hello" and outs[0].prompt is None
    assert outs[0].text == llm.tokenizer.decode(outs[0].token_ids)
    single = llm.generate("hello", SamplingParams(max_tokens=5, temperature=0, ignore_eos=True))
    assert single[0].token_ids == outs[1].token_ids


def test_greedy_is_deterministic_and_chunked_prefill_agrees(llm, home):
    prompt = list(range(40, 140))
    first = llm.generate([prompt], GREEDY)[0].token_ids
    assert llm.generate([prompt], GREEDY)[0].token_ids == first
    chunked = LLM(home / "default-v1", chunk_size=16)
    assert chunked.generate([prompt], GREEDY)[0].token_ids == first


def test_seeded_sampling_repeats_and_seeds_differ(llm):
    def run(seed):
        params = SamplingParams(max_tokens=24, temperature=1.0, top_p=0.9, top_k=50, seed=seed, ignore_eos=True)
        return llm.generate(["abc"], params)[0].token_ids

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_stop_token_id_ends_the_request(llm):
    free = llm.generate(["stop here"], GREEDY)[0].token_ids
    stop_id = free[5]
    out = llm.generate(
        ["stop here"], SamplingParams(max_tokens=24, temperature=0, ignore_eos=True, stop_token_ids=[stop_id])
    )[0]
    assert out.token_ids == free[: free.index(stop_id) + 1]
    assert out.finish_reason == "stop"


def test_stop_string_cuts_the_text(llm):
    free = llm.generate(["The quick brown fox"], SamplingParams(max_tokens=60, temperature=0, ignore_eos=True))[0]
    ascii_at = next(i for i, t in enumerate(free.token_ids) if 33 <= t < 127 and i > 0)
    stop = chr(free.token_ids[ascii_at])
    out = llm.generate(
        ["The quick brown fox"], SamplingParams(max_tokens=60, temperature=0, ignore_eos=True, stop=[stop])
    )[0]
    assert out.finish_reason == "stop"
    assert stop not in out.text
    assert free.text.startswith(out.text) and free.text[len(out.text)] == stop


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(max_tokens=0), "max_tokens"),
        (dict(temperature=-1), "temperature"),
        (dict(top_p=0), "top_p"),
        (dict(top_k=0), "top_k"),
        (dict(stop=[""]), "stop"),
        (dict(stop_token_ids=[-1]), "stop_token_ids"),
    ],
)
def test_sampling_params_name_the_bad_field(kwargs, field):
    with pytest.raises(TokdriftError, match=f"field '{field}'"):
        SamplingParams(**kwargs)


def test_bad_requests_are_refused_with_numbers(llm):
    with pytest.raises(EngineError, match="non-empty prompt"):
        llm.generate([""], GREEDY)
    with pytest.raises(EngineError, match=r"token ids must be in \[0, 272\), found 999"):
        llm.generate([[1, 999]], GREEDY)
    with pytest.raises(EngineError, match=r"exceeds max_model_len \(8192\)"):
        llm.generate([[1, 2]], SamplingParams(max_tokens=8191))
    with pytest.raises(EngineError, match="attention.backend"):
        LLM(llm.checkpoint, attention_backend="flash")


def test_soak_generate_and_checkpoint_commands(home, tmp_path):
    from tokdrift.cli.soak import app

    runner = CliRunner()
    result = runner.invoke(app, ["generate", "hello", "--max-tokens", "8"], env={"TOKDRIFT_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert "> hello" in result.output and " tokens in " in result.output
    result = runner.invoke(app, ["checkpoint", str(tmp_path / "ck")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ck" / "config.json").exists() and (tmp_path / "ck" / "model.safetensors").exists()


def test_soak_generate_with_a_missing_model_is_a_user_error(tmp_path):
    from tokdrift.cli.soak import app

    result = CliRunner().invoke(app, ["generate", "hi", "--model", str(tmp_path / "nope")])
    assert isinstance(result.exception, TokdriftError)
    assert "nope" in str(result.exception)


def test_checkpoint_tokenizer_json_is_used(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tests.engine._reference import write_reference

    write_reference("hybrid_moe_shared_gqa", tmp_path)
    vocab = {"[UNK]": 0, "hello": 5, "world": 7, "again": 9}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    llm = LLM(tmp_path, max_model_len=32)
    out = llm.generate("hello world", SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))[0]
    assert out.prompt_token_ids == [5, 7]
    assert llm.tokenizer.decode([5, 9]) == "hello again"


def test_byte_tokenizer_round_trips_utf8_and_drops_specials():
    from engine.tokenizer import ByteTokenizer

    tok = ByteTokenizer(272)
    ids = tok.encode("héllo ✓")
    assert len(ids) == len("héllo ✓".encode())
    assert tok.decode(ids + [256, 258]) == "héllo ✓"
    assert tok.special_ids == {"<|endoftext|>": 256, "<|im_start|>": 257, "<|im_end|>": 258}
