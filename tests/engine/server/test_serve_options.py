"""The server's command line is generated from EngineConfig and ServerConfig: every field is an
option, --engine-arg words become one JSON document, and a bad option names itself."""

import json
import subprocess
import sys
from dataclasses import fields

import pytest
import typer

from engine.runtime.config import CACHE_TYPES, MOE_BACKENDS, EngineConfig
from engine.server.cli import ServeOptions, parse_args, serve
from engine.server.config import ServerConfig
from engine.server.errors import ServerError


def test_every_config_field_is_an_option_with_help():
    command = typer.main.get_command(_app())
    names = {p.name: p for p in command.params}
    for cls in (EngineConfig, ServerConfig):
        for f in fields(cls):
            assert f.name in names, f.name
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"


def _app():
    app = typer.Typer()
    app.command()(serve)
    return app


def test_words_become_a_document_that_round_trips(tmp_path):
    options = parse_args(
        [
            "--kv-tokens=2048",
            "--fault",
            "gc-pressure",
            "--enable-mixed-chunk",
            "--threads",
            "1",
            "--step-history",
            "100",
        ]
    )
    assert options.engine == {"kv_tokens": 2048, "faults": ["gc-pressure"], "mixed_chunk": True, "num_threads": 1}
    assert options.server == {"step_history": 100}
    path = options.write(tmp_path / "engine-config.json")
    again = ServeOptions.read(path)
    assert again == options
    assert again.engine_config().fault_set.gc_pressure and not again.engine_config().fault_set.kv_scatter
    assert again.engine_config(num_threads=7).num_threads == 1  # given beats the default


def test_defaults_stay_where_the_server_runs():
    options = parse_args([])
    assert options.engine == {} and options.server == {}
    assert options.engine_config(num_threads=3).num_threads == 3
    assert options.engine_config() == EngineConfig()


@pytest.mark.parametrize(
    "words, says",
    [
        (["--kv-tokenz=1"], "No such option: --kv-tokenz"),
        (["--kv-tokens=x"], "--kv-tokens"),
        (["--fault=slow"], "unknown fault 'slow'"),
        (["--mamba-slots=2"], "mamba_slots must be at least max_running_requests"),
    ],
)
def test_a_bad_option_names_itself(words, says):
    with pytest.raises(ServerError, match=None) as info:
        parse_args(words)
    assert says in str(info.value)


def test_forward_paths_old_name_is_still_read_from_words_and_documents(tmp_path):
    """--decode-path (before the fast path took every forward): in a soak's --engine-arg words, which
    its run directory keeps, and in a --config document. It is read under the new name, and a later
    option wins whichever name it has."""
    command = typer.main.get_command(_app())
    old = next(p for p in command.params if p.name == "decode_path")
    assert old.opts == ["--decode-path"] and old.help == "The old name of --forward-path (still read)."
    with pytest.warns(FutureWarning, match="engine option decode_path is now named forward_path"):
        options = parse_args(["--decode-path=reference", "--kv-tokens=2048"])
    assert options.engine == {"forward_path": "reference", "kv_tokens": 2048}
    assert options.engine_config().forward_path == "reference"
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"engine": {"decode_path": "reference"}}))
    with pytest.warns(FutureWarning):
        from_file = ServeOptions.read(path)
    assert from_file.engine == {"forward_path": "reference"} and from_file.to_json()["engine"] == {
        "forward_path": "reference"
    }
    with pytest.warns(FutureWarning):
        assert parse_args([f"--config={path}", "--forward-path=fast"]).engine == {"forward_path": "fast"}
    with pytest.warns(FutureWarning):
        assert ServeOptions({"forward_path": "reference"}).with_({"decode_path": "fast"}).engine == {
            "forward_path": "fast"
        }
    with pytest.warns(FutureWarning), pytest.raises(ServerError, match="forward_path must be one of fast, reference"):
        parse_args(["--decode-path=compiled"])
    with pytest.raises(ServerError, match="decode_path is the old name of forward_path; give one of them"):
        parse_args(["--decode-path=reference", "--forward-path=fast"])


def test_a_document_with_an_unknown_field_is_refused(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"engine": {"kv_tokenz": 1}}))
    with pytest.raises(ServerError, match="unknown 'kv_tokenz'"):
        ServeOptions.read(path)
    path.write_text("{not json")
    with pytest.raises(ServerError, match="cannot read it as JSON"):
        ServeOptions.read(path)


def test_the_choices_the_config_names_are_the_ones_the_builders_know():
    from engine.cache import CACHE_TYPES as builders
    from engine.model.experts import ExpertProvider
    from engine.moe.provider import make_expert_provider

    assert set(CACHE_TYPES) == set(builders)
    # Every MoE backend the config accepts builds a provider (a name the builder lacks raises).
    assert all(isinstance(make_expert_provider(name, moe_cache_size=2), ExpertProvider) for name in MOE_BACKENDS)


def test_the_command_line_loads_without_torch():
    code = "import sys; import engine.server.cli, tokdrift.cli.soak; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
