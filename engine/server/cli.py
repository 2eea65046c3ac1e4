"""The built-in server's command line: `soak serve`, and `python -m engine.server` (how a soak starts
its engine).

One option per `EngineConfig` and `ServerConfig` field, generated from the fields, whose defaults
and help are declared once, with the configs. `--config FILE` gives the options as one JSON
document, `{"engine": {...}, "server": {...}, "log_file": ...}`, which is how a soak hands its
engine options to the engine it starts; options given beside it win. Torch loads only when the
server starts.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import types
import typing
from collections.abc import Sequence
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from engine.runtime.config import RENAMED_OPTIONS, EngineConfig, EngineConfigError, current_names
from engine.server.config import ServerConfig
from engine.server.errors import ServerError

HELP = "Serve the built-in engine as an OpenAI-compatible server with Prometheus /metrics."
ENVVARS = {"api_key": "TOKDRIFT_API_KEY"}


@dataclass(frozen=True)
class ServeOptions:
    """What the server is started with: the engine and server fields that were given (the rest keep
    their defaults, decided where the server runs) and the log file."""

    engine: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    log_file: str | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "engine", current_names(self.engine))  # an old name read under its new one
        except EngineConfigError as exc:
            raise ServerError(f"engine options: {exc}") from None
        for name, cls, given in (("engine", EngineConfig, self.engine), ("server", ServerConfig, self.server)):
            unknown = sorted(set(given) - {f.name for f in fields(cls)})
            if unknown:
                raise ServerError(
                    f"{name} options: unknown {', '.join(map(repr, unknown))}; known: "
                    f"{', '.join(f.name for f in fields(cls))}"
                )
        if "faults" in self.engine:
            object.__setattr__(self, "engine", {**self.engine, "faults": list(self.engine["faults"])})
        try:
            self.engine_config()
            ServerConfig(**self.server)
        except (EngineConfigError, TypeError) as exc:
            raise ServerError(f"engine options: {exc}") from None

    def engine_config(self, num_threads: int | None = None) -> EngineConfig:
        """The engine's config; `num_threads` is the default for a thread count not given."""
        given = dict(self.engine)
        if given.get("num_threads") is None and num_threads is not None:
            given["num_threads"] = num_threads
        return EngineConfig(**given)

    def with_(
        self, engine: dict[str, Any] | None = None, server: dict[str, Any] | None = None, log_file: str | None = None
    ) -> ServeOptions:
        """These options with more given on top (later values win, under whichever name)."""
        try:
            engine = current_names(engine or {})
        except EngineConfigError as exc:
            raise ServerError(f"engine options: {exc}") from None
        return ServeOptions(
            {**self.engine, **engine},
            {**self.server, **(server or {})},
            log_file if log_file is not None else self.log_file,
        )

    def to_json(self) -> dict[str, Any]:
        return {"engine": dict(self.engine), "server": dict(self.server), "log_file": self.log_file}

    @classmethod
    def from_json(cls, obj: Any, where: str = "the options") -> ServeOptions:
        if not isinstance(obj, dict) or set(obj) - {"engine", "server", "log_file"}:
            raise ServerError(f"{where}: expected an object with engine, server and log_file, found {obj!r:.200}")
        return cls(dict(obj.get("engine") or {}), dict(obj.get("server") or {}), obj.get("log_file"))

    @classmethod
    def read(cls, path: Path) -> ServeOptions:
        try:
            obj = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ServerError(f"--config {path}: cannot read it as JSON: {exc}") from None
        return cls.from_json(obj, where=f"--config {path}")

    def write(self, path: Path) -> Path:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        return Path(path)


def parse_args(args: Sequence[str]) -> ServeOptions:
    """`serve` options given as command-line words (a soak's --engine-arg) as ServeOptions; an
    unknown or malformed option is a ServerError that names it."""
    command = typer.main.get_command(_app())
    try:
        ctx = command.make_context("serve", list(args))
    except typer.exceptions.TyperException as exc:  # the parser's usage errors
        raise ServerError(f"engine options {' '.join(args)!r}: {exc.format_message()}") from None
    return _options(ctx.params)


def serve(**given: Any) -> None:
    """Serve until interrupted. Parameters are generated (see `_signature`)."""
    run(_options(given))


def run(options: ServeOptions) -> None:
    """Start the server with these options, in this process."""
    from engine.runtime.logfmt import attach_log
    from engine.server.main import bind
    from engine.server.main import serve as run_server

    engine_config = options.engine_config(num_threads=serving_threads())
    server_config = ServerConfig(**options.server)
    engine_log = logging.getLogger("engine")
    engine_log.propagate = False  # its lines go out once, in FreeToken's format
    attach_log(engine_log, sys.stderr)
    if options.log_file is not None:
        log_file = Path(options.log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        attach_log(engine_log, open(log_file, "a", buffering=1, encoding="utf-8"))
    sock = bind(server_config.host, server_config.port)
    verbose = logging.getLogger().level <= logging.INFO
    typer.echo(
        f"loading the engine; then serving on http://{server_config.host}:{server_config.port}/v1 "
        "(metrics at /metrics)",
        err=True,
    )
    run_server(engine_config, server_config, log_level="info" if verbose else "warning", access_log=verbose, sock=sock)


def serving_threads() -> int:
    """Model threads when serving on the CPU: every core this process may use but one. Torch's own
    threads spin while they wait for work, so with every core taken they fight the server's thread
    (which streams each token) and a soak driver on the same machine: on two cores that halved the
    decode rate of a served probe and made it swing by 10-20 % from one run to the next. A soak
    pins its engines to the cores it leaves free (soak.affinity); the threads follow those."""
    try:
        num_cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS
        num_cpus = os.cpu_count() or 1
    return max(1, num_cpus - 1)


def _options(params: dict[str, Any]) -> ServeOptions:
    """The options of a parsed command line; an option not given is None (a repeatable one empty)."""
    given = {k: v for k, v in params.items() if v is not None and v != [] and v != ()}
    base = ServeOptions.read(given.pop("config")) if "config" in given else ServeOptions()
    log_file = given.pop("log_file", None)
    engine_names = {f.name for f in fields(EngineConfig)} | set(RENAMED_OPTIONS)
    engine = {
        k: (str(v) if k == "model" else list(v) if k == "faults" else v) for k, v in given.items() if k in engine_names
    }
    server = {k: v for k, v in given.items() if k not in engine_names}
    return base.with_(engine, server, str(log_file) if log_file is not None else None)


def _signature() -> inspect.Signature:
    """serve's parameters: --config, --log-file, then one option per config field."""
    params = [
        inspect.Parameter(
            "config",
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[
                Path | None,
                typer.Option(
                    help='Options as one JSON document ({"engine": {...}, "server": '
                    '{...}, "log_file": ...}); options given beside it win.'
                ),
            ],
        ),
        inspect.Parameter(
            "log_file",
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[
                Path | None, typer.Option(help="Also append the engine log (FreeToken format) to this file.")
            ],
        ),
    ]
    for cls in (ServerConfig, EngineConfig):
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            params.append(
                inspect.Parameter(
                    f.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_option(f, hints[f.name])
                )
            )
    engine_fields = {f.name: f for f in fields(EngineConfig)}
    hints = typing.get_type_hints(EngineConfig)
    for old, new in RENAMED_OPTIONS.items():  # still read: a soak's run directory keeps the words it was given
        params.append(
            inspect.Parameter(
                old,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=_option(engine_fields[new], hints[new], old_name=old),
            )
        )
    return inspect.Signature(params)


def _option(f: Field[Any], hint: Any, old_name: str | None = None) -> Any:
    """The typer option of config field `f`, or of its old name (RENAMED_OPTIONS): the same values, a
    line of help that names the new flag."""
    flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
    help_text = f.metadata.get("help", "")
    if f.default is not None and f.default != ():
        help_text += f" [default: {f.default}]"
    if old_name is not None:
        flag, help_text = "--" + old_name.replace("_", "-"), f"The old name of {flag} (still read)."
    kind = _cli_type(hint)
    if kind is bool:
        off = flag.replace("--enable-", "--disable-") if flag.startswith("--enable-") else "--no-" + flag[2:]
        decls = [f"{flag}/{off}"]
    else:
        decls = [flag]
    info = typer.Option(*decls, help=help_text, envvar=ENVVARS.get(f.name), show_default=False)
    return Annotated[kind | None, info]


def _cli_type(hint: Any) -> Any:
    """The command-line type of a config field's type (a type or a typing form): Optional[X] is X,
    tuple[str, ...] a repeatable str (list[str])."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is tuple:
        return types.GenericAlias(list, (args[0],))
    if origin is typing.Union and len(args) == 1:
        return args[0]
    return hint


_SIGNATURE = _signature()
serve.__signature__ = _SIGNATURE  # type: ignore[attr-defined]  # read by inspect.signature (typer); the stubs give functions none
serve.__annotations__ = {p.name: p.annotation for p in _SIGNATURE.parameters.values()}
serve.__doc__ = HELP


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, help=HELP)
    app.command("serve", help=HELP)(serve)
    return app


def main() -> None:
    """`python -m engine.server [options]`: a bad option or config is one line on stderr (the
    soak that started the server puts it in its engine log), no traceback. The engine imports
    nothing of the command layer (tokdrift.cli), so it says so itself."""
    from ground import TokdriftError

    app = typer.Typer(add_completion=False)
    app.command(help=HELP)(serve)
    try:
        app()
    except TokdriftError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
