"""docs/errors.md names, for each error message, the test that checks it.

This keeps the page honest: every test it names must exist (a Python test is a
`def test_name` in the file; a C test is `TEST(name)`), and the test's file must
hold a distinctive fragment of the message the row gives: at least 12
consecutive characters of the message's literal text (the text in backticks,
placeholders such as `<x>` and `...` removed), compared with the file's source
as written and with regex escapes (backslashes) removed.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "errors.md"
REF = re.compile(r"((?:tests|runtime/tests)/[\w./-]+\.(?:py|c))::(\w+)")
WINDOW = 12


def _rows():
    for lineno, line in enumerate(DOC.read_text().splitlines(), 1):
        if not line.startswith("|") or "::" not in line:
            continue
        refs = REF.findall(line)
        if refs:
            yield lineno, line, refs


def _message(line):
    m = re.search(r"`([^`]+)`", line.split("|", 2)[2])
    return m.group(1).replace("\\|", "|") if m else None


def _fragment_found(message, source):
    loose = re.sub(r"\\(.)", r"\1", source)
    for chunk in re.split(r"<[^<>]*>|\.\.\.", message):
        for i in range(len(chunk) - WINDOW + 1):
            window = chunk[i:i + WINDOW]
            if window in source or window in loose:
                return True
    return False


def test_doc_exists_and_names_tests():
    assert DOC.exists(), "docs/errors.md is missing"
    assert sum(1 for _ in _rows()) >= 100, "docs/errors.md names fewer tests than expected"


def test_every_referenced_test_exists_and_checks_the_message():
    sources = {}
    problems = []
    for lineno, line, refs in _rows():
        message = _message(line)
        if message is None:
            problems.append(f"docs/errors.md:{lineno}: no message in backticks: {line[:120]}")
            continue
        for path, name in refs:
            if path not in sources:
                f = ROOT / path
                sources[path] = f.read_text() if f.exists() else None
            src = sources[path]
            if src is None:
                problems.append(f"docs/errors.md:{lineno}: {path} does not exist")
                continue
            if path.endswith(".c"):
                defined = f"TEST({name})" in src
            else:
                defined = re.search(rf"^\s*(?:async\s+)?def {name}\(", src, re.M) is not None
            if not defined:
                problems.append(f"docs/errors.md:{lineno}: {path} defines no test {name}")
            elif not _fragment_found(message, src):
                problems.append(f"docs/errors.md:{lineno}: {path}::{name} holds no "
                                f"{WINDOW}-character fragment of `{message[:80]}`")
    assert not problems, "\n".join(problems)
