"""The import arrows of shared/DESIGN.md, read from the source (ast): soak -> replay, engine,
rundir, logformats; diagnostics -> rundir, logformats; reports -> diagnostics, rundir,
logformats; replay -> rundir; logformats (the readers of engine logs and /metrics scrapes,
which the soak uses live on a URL target and diag afterwards) -> rundir; engine and rundir
import none of the others; nothing but engine imports torch.
Only the command layer, tokdrift/cli (the commands, and the fault matrix that runs a soak and
then judges it), ties everything together: it is not one of the packages checked here.

DESIGN's "soak -> engine only for the built-in target, imported lazily": the built-in target's
engine runs as its own process (`python -m engine.server`), so the soak's process imports only the
engine's torch-free modules (its command line, its wire types, its step record: SOAK_USES_OF_ENGINE)
and never its model or runtime; the tests below check both the list and that torch stays out.

The one arrow from soak to diagnostics: a soak handed no judge of its own asks diagnostics' running
verdict after every probe cycle (soak/judge.py, default_judge), so that a soak built in Python decides
as `soak run` does. It imports only SOAK_USES_OF_DIAGNOSTICS, only inside a function (importing the
soak loads no analysis), and diagnostics imports no soak, so there is no circle."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "replay", "soak", "rundir", "logformats", "diagnostics", "reports", "logsim", "vllm_plugin")
MAY_IMPORT = {
    "engine": set(),
    "rundir": set(),
    "replay": {"rundir"},
    "logformats": {"rundir", "vllm_plugin"},  # the step record's line format (vllm_plugin.record)
    "soak": {"replay", "engine", "rundir", "logformats"},
    "diagnostics": {"rundir", "logformats"},
    "reports": {"diagnostics", "rundir", "logformats"},
    "logsim": set(),  # the labelled-log simulator of the tests and benchmarks
    "vllm_plugin": set(),  # inside the user's vLLM, installed without dependencies: the ground alone
}
# The engine's modules the soak may import: torch-free, checked by loading them below.
SOAK_USES_OF_ENGINE = {"engine.server.cli", "engine.server.errors", "engine.server.wire", "engine.runtime.stats"}
# The diagnostics modules the soak may import, each inside a function only (checked below).
SOAK_USES_OF_DIAGNOSTICS = {"diagnostics.decision.live"}
TORCH_FREE = ("replay", "rundir", "logformats", "diagnostics", "reports", "logsim")
# Arrows that still run the wrong way, each with why; the test fails on any other, and on one of
# these that is gone (so the list cannot outlive the code).
KNOWN: dict[tuple[str, str], str] = {}


# The command layer's helpers (tokdrift.cli) that a package may still import, each with why.
CLI_KNOWN: dict[tuple[str, str], str] = {}


def modules(path: Path) -> set[str]:
    """Dotted names of every absolute import in a module, at any depth (lazy ones too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def modules_on_import(path: Path) -> set[str]:
    """Dotted names of the absolute imports a module runs when it is imported: those outside any function."""
    out, todo = set(), [ast.parse(path.read_text(encoding="utf-8"), str(path))]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
        todo.extend(ast.iter_child_nodes(node))
    return out


def imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in a module, at any depth (lazy ones too)."""
    return {name.split(".")[0] for name in modules(path)}


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
                if (package, other) == ("soak", "diagnostics") and _lazy_uses_of_diagnostics(path):
                    continue
                if (rel, other) in KNOWN:
                    seen.add((rel, other))
                    continue
                wrong.append(f"{rel} imports {other}")
    assert not wrong, "arrows that run back up:\n" + "\n".join(wrong)
    assert seen == set(KNOWN), f"known exceptions no longer in the code: {set(KNOWN) - seen}"


def _lazy_uses_of_diagnostics(path: Path) -> bool:
    """Whether a soak module imports only SOAK_USES_OF_DIAGNOSTICS of diagnostics, and those only inside a function."""
    used = {name for name in modules(path) if name.split(".")[0] == "diagnostics"}
    return used <= SOAK_USES_OF_DIAGNOSTICS and not used & modules_on_import(path)


def test_the_reader_of_imports_sees_lazy_and_relative_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os.path\nfrom . import sibling\n\ndef f():\n    from torch import nn\n")
    assert imports(module) == {"os", "torch"}


def test_the_ground_stands_on_nothing_and_no_package_reaches_the_roof():
    """`ground` (the version, TokdriftError and the Label base of closed sets) imports nothing of the
    project; `tokdrift` (the roof: the command lines) is imported by no package, the ground and the
    vLLM plugins included, but where CLI_KNOWN says why."""
    ground = {name.split(".")[0] for path in (ROOT / "ground").rglob("*.py") for name in modules(path)}
    assert not ground & {*PACKAGES, "tokdrift"}, ground
    wrong, seen = [], set()
    for package in (*PACKAGES, "ground"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for name in sorted(n for n in modules(path) if n == "tokdrift" or n.startswith("tokdrift.")):
                if (rel, name) in CLI_KNOWN:
                    seen.add((rel, name))
                else:
                    wrong.append(f"{rel} imports {name}")
    assert not wrong, "packages that import the roof (tokdrift):\n" + "\n".join(wrong)
    assert seen == set(CLI_KNOWN), f"known exceptions no longer in the code: {set(CLI_KNOWN) - seen}"


def test_the_soak_and_its_commands_load_without_torch():
    """The built-in target starts its engine as a process (`python -m engine.server`); the soak
    reads the engine's torch-free wire types and command line only, so a soak of a URL target,
    and the soak's own process, never load torch."""
    code = (
        "import sys\n"
        "import soak.run, soak.targets, soak.samplers, soak.manifest, tokdrift.cli.soak, tokdrift.cli.diag\n"
        f"import {', '.join(sorted(SOAK_USES_OF_ENGINE))}\n"
        "print(sorted(m for m in ('torch', 'triton', 'engine.runtime.engine') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_reader_of_imports_tells_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nif True:\n    import json\n\ndef f():\n    import diagnostics.decision.live\n")
    assert modules(module) == {"os", "json", "diagnostics.decision.live"}
    assert modules_on_import(module) == {"os", "json"}


def test_importing_the_soak_loads_no_analysis():
    """The soak asks diagnostics' running verdict only once a soak that probes is built."""
    code = "import sys\nimport soak.run, soak.judge\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'diagnostics'))\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_soak_imports_only_the_engines_torch_free_modules():
    wrong = []
    for path in sorted((ROOT / "soak").rglob("*.py")):
        for name in sorted(n for n in modules(path) if n.split(".")[0] == "engine"):
            if name not in SOAK_USES_OF_ENGINE:
                wrong.append(f"{path.relative_to(ROOT).as_posix()} imports {name}")
    assert not wrong, "the soak reaches into the engine beyond its torch-free modules:\n" + "\n".join(wrong)


def test_the_experts_and_the_runtime_run_one_way():
    """engine.runtime builds the experts' provider; engine.moe (whose torch-free package names the
    backends the config accepts) never imports the runtime back."""
    wrong = [
        f"{path.relative_to(ROOT).as_posix()} imports {name}"
        for path in sorted((ROOT / "engine" / "moe").rglob("*.py"))
        for name in sorted(modules(path))
        if name.startswith("engine.runtime")
    ]
    assert not wrong, wrong
    assert not {"torch", "triton"} & imports(ROOT / "engine" / "moe" / "__init__.py")


def _edges() -> dict[str, set[str]]:
    """Module -> the project modules it imports, at any depth (a lazy import inside a function is an
    arrow too: it only hides a circle), leaving out imports under `if TYPE_CHECKING:` (types only,
    never run). `from package import name` is an arrow to package.name where that is a module."""
    files = {}
    for package in (*PACKAGES, "ground", "tokdrift", "benchmarks"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        typing_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body
            for node in ast.walk(stmt)
        }
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            out |= {t for t in targets if t in files and t != name}
        edges[name] = out
    return edges


def test_no_module_imports_one_that_imports_it_back():
    """No circle in the import picture: every module of the packages, the ground, the command layer
    and the benchmarks, lazy imports included."""
    edges, state, circles = _edges(), {}, []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for other in sorted(edges[module]):
            if state.get(other) == "open":
                circles.append(" -> ".join([*path[path.index(other) :], other]))
            elif other not in state:
                visit(other, [*path, other])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles:\n" + "\n".join(circles)
