"""The reader test's mechanical checks: what can be counted in a summary without a reader.

    .venv/bin/python docs/reader-test/checks.py docs/reader-test/after-*.md

One row per summary: the words above the details break (the three lines: the answer with its size
and how sure, what to do, why) and without their commands; whether they hold a next step and a
details break; whether line one says the direction in words (`N% slower`, `no slower`) and the
speeds in tok/s; and what the readers of issue 53 stumbled on: a ratio flipped into a multiple, a
time with fractions of a second, a placeholder in a command (`…`, `URL`), a loss said where the
speeds rose, the engine called anything but soaked or fresh, an interval other than 90% left
unexplained, words the second reader found made up or statistical above the break, text cut
inside a word, a top suspect beside a verdict that is not engine age, a suspect whose medians do
not move the way its words say, an operator's warning (failed requests, a full KV cache) only among
the checks, `engine: unknown`, and a short run (under an hour) whose answer is not engine age but
does not say how long it was. And what the third reader stumbled on: speeds in line one that no
table row below states (computed, not measured), a test's instrument in a suggested soak
(`--fault`, a fixture's or a temporary folder's path), and terms a first-time reader does not know
above the break (probes, engine life, baseline, onset, the control, "brought it back"). And what the
fourth reader asked for: line one opens with one of five fixed verdict words and the confidence in
parentheses (`Aged (medium confidence):`), then one ratio in one direction (`is 0.72x ... (28%
slower; 90% interval 0.63-0.82)`); the other measures come after the engine line, not first below the
break; a failed check beside a can't-tell verdict is shown as `not met`, never FAIL; and the analysis'
own names (soaked engine, block means, healthy window) stay below the break.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

AGE = ("The engine slowed down with age", "Aged", "Probably aged")
# Line one since the fifth version: a fixed word, the confidence in parentheses; since the eighth, one of
# three words (Aged, Not aged, Can't tell).
VERDICT_WORD = re.compile(
    r"^\*\*(Aged|Probably aged|Not aged|Not shown to be aged|Can't tell) \(((high|medium|low) confidence|undecided|"
    r"leaning not aged|leaning aged)\)"
)
# Line one's figure since the eighth version: one change in percent, its direction in words, its interval.
PERCENT = re.compile(r"\bdecode (?:is|was) (\d+)% (slower|faster) [^(]*\((?:[^;)]*; )?\d+(?:\.\d+)?% interval ")
X_RATIO = re.compile(
    r"\bis (\d+\.\d\d)x [^(]*\((no slower|(\d+)% slower|(\d+)% faster)[^;]*; \d+(?:\.\d+)?% interval "
    r"\d+\.\d\d-\d+\.\d\d\)"
)
FLIPPED_X = re.compile(r"(?<![Aa] restart made decode )\b\d+\.\d+x (?:faster|slower)")
BREAK = "#### Details"
NEXT_STEP = re.compile(
    r"\b(Restart it|Run longer|Soak (again|it|the engine)|Nothing to restart|file a bug|Confirm it with a soak|"
    r"Give the engine|restart the fresh engine)\b",
    re.IGNORECASE,
)
MULTIPLE = re.compile(r"\b\d+\.\d+x\b")
SUB_SECOND = re.compile(r"\d\d:\d\d:\d\d\.\d")
DIRECTION = re.compile(r"\d+% slower|\bno slower\b|\d+% faster")
SPEEDS = re.compile(r"(\d+(?:\.\d+)?) → (\d+(?:\.\d+)?) tok/s[^(]*\((\d+)% slower")
ACROSS = re.compile(r"(\d+(?:\.\d+)?) tok/s just before a restart, (\d+(?:\.\d+)?) just after \((\d+)% slower")
OTHER_NAMES = re.compile(r"\b(aged|healthy|main|restarted engine)\b", re.IGNORECASE)
LEVEL = re.compile(r"\b(\d+(?:\.\d+)?)% interval")
# What the second reader found made up, or statistics, in the first lines (issue 53, items 4 and 7).
JARGON = (
    "control's youth",
    "engine life 0",
    "generous context-only",
    "hold at once",
    "widened",
    "not 90%",
    "checked after every",
    "of its own speed",
    "of its speed after",
    # What the fourth reader still found there (the fifth version keeps them below the break).
    "soaked engine",
    "block means",
    "healthy window",
    "healthy model",
    "generous",
)
ROSE = re.compile(r"\b(rose|fell|rises|falls) from a median of ([\d,.]+) before the onset to ([\d,.]+) after")
OLD_MEDIANS = re.compile(
    r"\b(rises|falls) as [^:]*: .*?median ([\d,.]+) (?:before the onset|early), ([\d,.]+) (?:after|late)"
)
QUARTERS = re.compile(
    r"\b(higher|lower) where [^:]*: a median of ([\d,.]+) in the quarter[^,]*, ([\d,.]+) in the quarter"
)
OPERATOR = ("`kv_space`", "`dropped_requests`", "`kv_exhaustion`", "`preemptions`", "`queue_buildup`")
SERVING = re.compile(r"([\d.]+) (s|min|h) of serving")
TOK_S = re.compile(
    r"(\d+(?:\.\d+)?) → (\d+(?:\.\d+)?) tok/s|(\d+(?:\.\d+)?) tok/s just before a restart, (\d+(?:\.\d+)?)|"
    r"(\d+(?:\.\d+)?) against (\d+(?:\.\d+)?) tok/s"
)
INSTRUMENT = re.compile(r"--fault|tests/fixtures/|/tmp/")
FIRST_TIME = re.compile(
    r"\b(probes?|engine life|baseline|batch and context|decode samples?|onset|the control|control's|"
    r"brought it back|bring it back|brings it back|they disagree|matched conditions|admit(ted)?|prefix cache)\b",
    re.IGNORECASE,
)


def checks(path: Path) -> dict[str, object]:
    text = path.read_text()
    lines = text.splitlines()
    # The three lines, without the title; a summary from before the details break, its first paragraph.
    top = text.split(BREAK, 1)[0].split("\n", 1)[1] if BREAK in text else lines[2]
    first = top.replace("**", "")
    line_one = lines[2]
    details = text.split(BREAK, 1)[-1].split("\n| |", 1)[0] if BREAK in text else text.split("\n| |", 1)[0]
    above_checks = text.split("**Checks**", 1)[0]
    prose = re.sub(r"`[^`]*`", "", first)
    age = line_one.startswith(tuple(f"**{x}" for x in AGE))
    word = VERDICT_WORD.match(line_one)
    # The engine named by the verdict word itself (`Aged`) is the answer, not a name for the engine.
    prose = prose.replace(word.group(0).strip("*"), "", 1) if word else prose
    x_said = X_RATIO.search(line_one) or PERCENT.search(line_one)
    engine_at = details.find("- engine:")
    others_at = (
        details.find("- other measures") if "- other measures" in details else details.find("- the other measures")
    )
    run_dir = "- source: `run_dir " in text
    flipped = [m.group(0) for m in SPEEDS.finditer(line_one) if float(m.group(2)) >= float(m.group(1))]
    flipped += [m.group(0) for m in ACROSS.finditer(line_one) if float(m.group(1)) >= float(m.group(2))]
    flipped += [
        m.group(0)
        for m in X_RATIO.finditer(line_one)
        if (m.group(3) and float(m.group(1)) >= 1) or (m.group(4) and float(m.group(1)) <= 1)
    ]
    levels = [x for x in LEVEL.findall(first) if float(x) != 90.0]
    serving = SERVING.search(text)
    seconds = None if serving is None else float(serving.group(1)) * {"s": 1, "min": 60, "h": 3600}[serving.group(2)]
    return {
        "words": len(first.split()),
        "words in line 1": len(line_one.replace("**", "").split()),
        "verdict word in line 1": bool(word),
        "one figure in line 1": bool(x_said),
        "prose words": len(prose.split()),
        "next step": bool(NEXT_STEP.search(first)),
        "details break": BREAK in text,
        "direction in line 1": bool(DIRECTION.search(line_one)),
        "tok/s in line 1": "tok/s" in line_one,
        # Before the fifth version any `N.NNx` was a flip; in the fifth to seventh, line one's `0.72x` was
        # the form and a flip a multiple said as faster or slower (but a restart's gain, `made decode 2.1x
        # faster`); since the eighth, percent above the break, so any multiple there is one.
        "multiple": bool(MULTIPLE.search(text.split(BREAK, 1)[0]))
        if PERCENT.search(line_one)
        else bool(FLIPPED_X.search(above_checks))
        if word
        else bool(MULTIPLE.search(above_checks)),
        "sub-second": bool(SUB_SECOND.search(text)),
        # A run directory knows its trace and target; a log knows neither (its command says HOST:PORT).
        "placeholder": "…" in first or bool(re.search(r"\bURL\b", first)) or (run_dir and "HOST:PORT" in first),
        "loss where it rose": bool(flipped),
        "other names": sorted({m.lower() for m in OTHER_NAMES.findall(prose)}),
        "level unexplained": bool(levels) and "- its interval: " not in details and "not 90%" not in first,
        "jargon above": [j for j in JARGON if j in first],
        "cut mid-word": bool(re.search(r"\w…", text)),
        "top suspect not age": "Top suspect:" in top and not age,
        "medians against words": _medians_against_words(text),
        "warning only in checks": any(f"**warn** {n}" in text or f"({n})" in text for n in OPERATOR)
        and "**Also:**" not in top,
        "engine unknown": "- engine: unknown" in details,
        "short run unsaid": not age and seconds is not None and seconds < 3600 and "lasted" not in first,
        "tok/s in no table": _speeds_unstated(line_one, text),
        "test flags in a command": sorted(
            {m for c in re.findall(r"`(soak [^`]*)`", first) for m in INSTRUMENT.findall(c)}
        ),
        "first-time jargon above": sorted({m[0].lower() for m in FIRST_TIME.findall(prose)}),
        "other measures before the engine": others_at != -1 and engine_at != -1 and others_at < engine_at,
        "FAIL beside can't tell": "**FAIL**" in text and not age and "verdict | insufficient_data" in text,
    }


def _speeds_unstated(line_one: str, text: str) -> list[str]:
    """Speeds line one says that no table row below states (to the reader's rounding): a speed that
    is computed, not measured, or one the table does not show."""
    table = " ".join(line for line in text.splitlines() if line.startswith("|"))
    stated = {round(float(x)) for x in re.findall(r"(\d+(?:\.\d+)?)(?= (?:against|->|tok/s))", table)}
    stated |= {round(float(x)) for x in re.findall(r"(?:against|->) (\d+(?:\.\d+)?)", table)}
    said = [x for m in TOK_S.finditer(line_one) for x in m.groups() if x is not None]
    return [x for x in said if round(float(x)) not in stated]


def _medians_against_words(text: str) -> int:
    """Suspects whose medians do not move the way their words say (equal counts as against)."""
    bad = 0
    for pattern in (ROSE, OLD_MEDIANS, QUARTERS):
        for word, a, b in pattern.findall(text):
            first, last = float(a.replace(",", "")), float(b.replace(",", ""))
            up = word in ("rose", "rises", "higher")
            bad += not ((last > first) if up else (last < first))
    return bad


def main(paths: list[str]) -> None:
    rows = [
        (Path(p).stem, checks(Path(p))) for p in sorted(paths, key=lambda p: int(re.sub(r"\D", "", Path(p).stem) or 0))
    ]
    keys = list(rows[0][1])
    print("| | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, row in rows:
        print(f"| {name} | " + " | ".join(_cell(row[k]) for k in keys) + " |")


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "-"
    if isinstance(v, list):
        return ", ".join(v) or "-"
    return str(v) if v else "-" if v == 0 and not isinstance(v, int) else str(v)


if __name__ == "__main__":
    main(sys.argv[1:])
