"""Redaction for what leaves the machine: prompt and completion text, secrets, home paths.

One `Redactor` passes over every text that goes into a report, summary or bundle and counts
what it removed, so that the summary can say so. `Redactor(enabled=False)` passes everything
through untouched (`--no-redact`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

# Categories, as the summary names them.
PROMPT = "prompt or completion text"
API_KEY = "API keys and secrets"
BEARER = "bearer tokens"
HOME = "home-directory paths"
CATEGORIES = (PROMPT, API_KEY, BEARER, HOME)

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
        return self._sub(_HOME, "~", s, HOME)

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
            return {name: self.json(value, str(name)) for name, value in obj.items()}
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
        found = [f"{self.counts[c]} {c}" for c in CATEGORIES if self.counts[c]]
        policy = "prompt and completion text, API keys, bearer tokens and home-directory paths are removed"
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
