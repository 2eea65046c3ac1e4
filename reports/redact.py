"""Redaction for what leaves the machine: prompt and completion text, secrets, home paths, and
the machine's own paths.

One `Redactor` passes over every text that goes into a report, summary or bundle and counts
what it removed, so that the summary can say so. `Redactor(enabled=False)` passes everything
through untouched (`--no-redact`).

The machine's paths: once anchored to a source (`anchor_to`), a path under the folder that holds
the run directory (or the log), under the project the soak ran from, or where the soak wrote the
run, is said relative to it (`0.3.14-baseline2/engine.log`, `examples/agent.jsonl`); the soak's
own executable by its name (`soak`, as the user typed it); any other absolute path under a
machine's usual roots (/tmp, /work, /opt, /data, /mnt, ...) by its last two parts (`…/models/
qwen.gguf`); a home directory as `~`.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Categories, as the summary names them.
PROMPT = "prompt or completion text"
API_KEY = "API keys and secrets"
BEARER = "bearer tokens"
HOME = "home-directory paths"
MACHINE = "paths of the machine that ran it"
CATEGORIES = (PROMPT, API_KEY, BEARER, HOME, MACHINE)
# Each category as one of it is said (`1 path of the machine that ran it`, not `1 paths`).
ONE = {
    PROMPT: "prompt or completion text",
    API_KEY: "API key or secret",
    BEARER: "bearer token",
    HOME: "home-directory path",
    MACHINE: "path of the machine that ran it",
}

# JSON keys whose value is request or response text.
PROMPT_KEYS = frozenset(
    {
        "prompt",
        "prompts",
        "messages",
        "content",
        "completion",
        "completions",
        "text",
        "texts",
        "system_prompt",
        "reasoning_content",
        "input_text",
        "output_text",
        "prompt_token_ids",
        "input_ids",
        "output_ids",
        "output_token_ids",
        "choices",
    }
)
# JSON keys whose value is a secret.
SECRET_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "openai_api_key",
        "hf_token",
        "access_token",
        "auth_token",
        "authorization",
        "x-api-key",
        "secret",
        "secret_key",
        "password",
        "token_secret",
    }
)
# Command-line flags whose next argument is a secret.
SECRET_FLAGS = frozenset({"--api-key", "--api_key", "--token", "--hf-token", "--password", "--secret"})

_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}")
_KEY_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})"
)
_KEY_VALUE = re.compile(
    r"(?i)([\"']?(?:api[_-]?key|openai_api_key|hf_token|access_token|auth_token|x-api-key|secret(?:_key)?|password)"
    r"[\"']?\s*[:=]\s*[\"']?)([^\s\"',;}\]]+)"
)
_HOME = re.compile(
    r"(?<![\w.~/])(?:/home/[^/\s\"'<>:;,]+|/Users/[^/\s\"'<>:;,]+|/root(?=[/\s\"'<>:;,)]|$)"
    r"|[A-Za-z]:\\Users\\[^\\\s\"']+)"
)
# Absolute paths under a machine's usual roots (two parts at least, so `/v1/models` of a URL, which
# follows a host name, and a lone `/models` stay).
_MACHINE_PATH = re.compile(
    r"(?<![\w.~/:-])/(?:tmp|var|opt|srv|mnt|media|data\d*|work|workspace|scratch|private|Volumes|usr|nix|gpfs|"
    r"lustre|storage|models|shared|cache)(?:/[^/\s\"'<>:;,`|)\]]+)+"
)
_QUOTED = r"(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\[[^\]]*\])"
_PROMPT_FIELD = re.compile(
    r"(?i)([\"']?\b(?:prompt|prompts|messages|content|completion|text|input|output|output_text|input_text|"
    r"reasoning_content|prompt_token_ids|input_ids|output_ids)[\"']?\s*[:=]\s*)(" + _QUOTED + ")"
)


_PROMPT_PAIR = re.compile(r"(?i)(?:^|(?<=, ))(" + "|".join(sorted(PROMPT_KEYS)) + r")=(.*?)(?=, [\w-]+=|$)", re.DOTALL)


class Redactor:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.counts: Counter[str] = Counter()
        self.anchors: list[tuple[re.Pattern[str], str]] = []  # (a folder of this machine, what it becomes)

    def anchor_to(self, path: str, command: list[str] | None = None) -> None:
        """Say paths relative to the source from here on: under the folder that holds it (a run
        directory or a log), under the project the soak ran from (its executable's venv, or the
        project whose tokdrift/cli/soak.py ran), under the folder the soak wrote the run into
        (`-o`, `--out`)."""
        if self.anchors:  # one source per redactor: the first anchoring holds
            return
        folders = [Path(path).resolve().parent]
        argv = [str(x) for x in (command or [])]
        if argv and os.path.isabs(argv[0]):
            exe = Path(argv[0])
            venv = exe.parent.parent
            if exe.parent.name == "bin" and venv.name.startswith("."):
                folders.append(venv.parent)  # <project>/.venv/bin/soak
            elif exe.parent.name == "cli" and exe.parent.parent.name == "tokdrift":
                folders.append(exe.parents[2])  # <project>/tokdrift/cli/soak.py, run as a script
            else:
                folders.append(exe.parent)
        for flag, value in zip(argv, argv[1:]):
            if flag in ("-o", "--out") and os.path.isabs(value):
                folders.append(Path(value).parent)
        found = {str(f) for f in folders if len(f.parts) > 1}
        for folder in sorted(found, key=len, reverse=True):
            self.anchors.append((re.compile(r"(?<![\w.~/-])" + re.escape(folder) + r"(?:/|(?![\w.-]))"), folder))

    def command(self, argv: list[str]) -> list[str]:
        """A recorded command line as the user typed it: the executable by its name, each argument
        through `json` (paths relative to the source, secrets out)."""
        out = self.json(list(argv))
        if self.enabled and out and isinstance(out[0], str) and os.path.isabs(str(argv[0])):
            self.counts[MACHINE] += 1
            out[0] = Path(str(argv[0])).name
        return list(out)

    def text(self, s: str) -> str:
        """One string (a log line, a path, an error): secrets, home paths and quoted prompt fields out."""
        if not self.enabled or not s:
            return s
        s = self._sub(_BEARER, lambda m: f"{m.group(1)}{m.group(2)}[redacted]", s, BEARER)
        s = self._sub(_KEY_SHAPES, "[redacted key]", s, API_KEY)
        s = self._sub(
            _KEY_VALUE, lambda m: m.group(1) + "[redacted]", s, API_KEY, skip=lambda m: m.group(2) == "[redacted"
        )
        s = self._sub(
            _PROMPT_FIELD,
            lambda m: m.group(1) + f"'[redacted {len(m.group(2)) - 2} chars]'",
            s,
            PROMPT,
            skip=lambda m: m.group(2).lstrip("'\"").startswith("[redacted"),
        )
        for pattern, _ in self.anchors:
            s = self._sub(pattern, lambda m: "" if m.group(0).endswith("/") else ".", s, MACHINE)
        s = self._sub(_HOME, "~", s, HOME)
        return self._sub(_MACHINE_PATH, lambda m: "…/" + "/".join(m.group(0).split("/")[-2:]), s, MACHINE)

    def fields(self, s: str) -> str:
        """An event's detail, `key=value, key=value` as diag joins the event's fields: text() plus
        unquoted values under prompt keys."""
        if not self.enabled or not s:
            return s
        s = self._sub(
            _PROMPT_PAIR,
            lambda m: f"{m.group(1)}=[redacted {len(m.group(2))} chars]",
            s,
            PROMPT,
            skip=lambda m: m.group(2).startswith("[redacted"),
        )
        return self.text(s)

    def json(self, obj: Any, key: str = "") -> Any:
        """A JSON value: text under prompt keys and values under secret keys out, every string through text()."""
        if not self.enabled:
            return obj
        k = key.lower()
        if k in SECRET_KEYS and obj not in (None, "", [], {}):
            self.counts[API_KEY] += 1
            return "[redacted]"
        if k in PROMPT_KEYS and isinstance(obj, (str, list, dict)) and obj:
            self.counts[PROMPT] += 1
            return f"[redacted {len(str(obj))} chars]"
        if isinstance(obj, dict):
            return {
                name: self.command(value)
                if name == "command" and isinstance(value, list)
                else self.json(value, str(name))
                for name, value in obj.items()
            }
        if isinstance(obj, list):
            out, secret_next = [], False
            for item in obj:
                if secret_next and isinstance(item, str):
                    self.counts[API_KEY] += 1
                    out.append("[redacted]")
                else:
                    out.append(self.json(item))
                secret_next = isinstance(item, str) and item.lower() in SECRET_FLAGS
            return out
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    def describe(self) -> str:
        """What was redacted, for the summary."""
        if not self.enabled:
            return "nothing: made with --no-redact, so prompt text, keys and paths are kept as found"
        found = [f"{self.counts[c]} {ONE[c] if self.counts[c] == 1 else c}" for c in CATEGORIES if self.counts[c]]
        policy = (
            "prompt and completion text, API keys, bearer tokens and home-directory paths are removed; "
            "the machine's paths are said relative to the run"
        )
        return f"{'; '.join(found)} ({policy})" if found else f"nothing found to remove ({policy})"

    def _sub(
        self,
        pattern: re.Pattern[str],
        repl: str | Callable[[re.Match[str]], str],
        s: str,
        category: str,
        skip: Callable[[re.Match[str]], bool] | None = None,
    ) -> str:
        def one(m: re.Match[str]) -> str:
            if skip is not None and skip(m):
                return m.group(0)
            self.counts[category] += 1
            return repl(m) if callable(repl) else repl

        return pattern.sub(one, s)
