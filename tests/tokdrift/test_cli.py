"""Every command of `soak` and `diag` has help text, and so does each of its options."""

import subprocess
import sys

import pytest
import typer

from tokdrift.cli.diag import app as diag_app
from tokdrift.cli.soak import app as soak_app


def _walk(command, path: tuple[str, ...]):
    yield path, command
    if hasattr(command, "commands"):  # a group; typer ships its own click
        for name, sub in command.commands.items():
            yield from _walk(sub, path + (name,))


@pytest.mark.parametrize("app, name", [(soak_app, "soak"), (diag_app, "diag")])
def test_every_command_and_option_has_help(app, name):
    root = typer.main.get_command(app)
    seen = 0
    for path, command in _walk(root, (name,)):
        seen += 1
        assert (command.help or command.short_help or "").strip(), f"{' '.join(path)} has no help"
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert (param.help or "").strip(), f"{' '.join(path)} {param.opts[0]} has no help"
            if param.param_type_name == "argument":
                assert (getattr(param, "help", None) or "").strip(), f"{' '.join(path)} {param.name} has no help"
    assert seen > 1


def test_user_error_prints_one_line_without_traceback(tmp_path):
    script = (
        "import typer\n"
        "from ground import TokdriftError\nfrom tokdrift.cli.app import run_app\n"
        "app = typer.Typer()\n"
        "@app.command()\n"
        "def boom():\n"
        "    raise TokdriftError('trace.jsonl:3: expected an object, found [1, 2]')\n"
        "run_app(app)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["error: trace.jsonl:3: expected an object, found [1, 2]"]
