"""The import arrows of shared/DESIGN.md, read from the source (ast): soak -> replay, engine,
rundir, logformats; diagnostics -> rundir, logformats; reports -> diagnostics, rundir,
logformats; replay -> rundir; logformats (the readers of engine logs and /metrics scrapes,
which the soak uses live on a URL target and diag afterwards) -> rundir; engine and rundir
import none of the others; nothing but engine imports torch.
Only the command layer, tokdrift/cli (the commands, and the fault matrix that runs a soak and
then judges it), ties everything together: it is not one of the packages checked here."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "replay", "soak", "rundir", "logformats", "diagnostics", "reports", "logsim")
MAY_IMPORT = {
    "engine": set(),
    "rundir": set(),
    "replay": {"rundir"},
    "logformats": {"rundir"},
    "soak": {"replay", "engine", "rundir", "logformats"},
    "diagnostics": {"rundir", "logformats"},
    "reports": {"diagnostics", "rundir", "logformats"},
    "logsim": set(),  # the labelled-log simulator of the tests and benchmarks
}
TORCH_FREE = ("replay", "rundir", "logformats", "diagnostics", "reports", "logsim")
# Arrows that still run the wrong way, each with why; the test fails on any other, and on one of
# these that is gone (so the list cannot outlive the code).
KNOWN: dict[tuple[str, str], str] = {}


def imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in a module, at any depth (lazy ones too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_imports_run_one_way():
    wrong, seen = [], set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            names = imports(path)
            if package in TORCH_FREE and {"torch", "triton"} & names:
                wrong.append(f"{rel} imports torch")
            for other in sorted((set(PACKAGES) - {package}) & names):
                if other in MAY_IMPORT[package]:
                    continue
                if (rel, other) in KNOWN:
                    seen.add((rel, other))
                    continue
                wrong.append(f"{rel} imports {other}")
    assert not wrong, "arrows that run back up:\n" + "\n".join(wrong)
    assert seen == set(KNOWN), f"known exceptions no longer in the code: {set(KNOWN) - seen}"


def test_the_reader_of_imports_sees_lazy_and_relative_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os.path\nfrom . import sibling\n\ndef f():\n    from torch import nn\n")
    assert imports(module) == {"os", "torch"}
