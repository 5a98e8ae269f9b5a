"""Every copyable fenced block (```python, ```sh, ```bash, ```console) in
README.md and docs/*.md runs as pasted.

Conventions (documented here, applied by this test):
- Each block runs in a fresh temporary directory in its own process, with a
  private HOME (so default caches are its own) and NKIPY_DOCS_REPO set to the
  repository root; the temporary directory holds links `build` and `.venv`
  to the checkout's, so paths the docs give relative to the repository root
  (build/neff/add.neff, .venv/bin/python) resolve as for a reader there.
  python blocks run with `.venv/bin/python`; sh/bash/console
  blocks run with `bash -e` with `.venv/bin` first on PATH. In console blocks
  only lines starting with `$ ` are commands (the prompt is stripped).
- Printed output is checked where a line of the block ends with a comment
  `# prints TEXT`: TEXT must appear in the block's stdout.
- A block that is not runnable alone (an API signature, pseudo-code, a
  long-running command, one needing a GPU or several hosts) is marked with an
  HTML comment `<!-- fragment: REASON -->` on the line just before its fence.
  It is skipped by name (file:line) with that reason, never silently.
- A failing block's test id and message name its file and line.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LANGS = {"python", "sh", "bash", "console"}
TIMEOUT_S = 300
_FENCE = re.compile(r"^```(\w+)[^\n]*$")


def _blocks():
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = md.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = _FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            lang, start = m.group(1), i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if lang in LANGS:
                prev = lines[start - 1].strip() if start else ""
                fm = re.match(r"<!--\s*fragment:\s*(.*?)\s*-->", prev)
                yield (f"{md.relative_to(ROOT)}:{start + 1}", lang,
                       "\n".join(lines[start + 1:j]) + "\n", fm.group(1) if fm else None)
            i = j + 1


BLOCKS = list(_blocks())


@pytest.mark.parametrize("where,lang,code,fragment", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_doc_block_runs(where, lang, code, fragment, tmp_path):
    if fragment is not None:
        pytest.skip(f"{where}: fragment: {fragment}")
    home = tmp_path / "home"
    home.mkdir()
    for name in ("build", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ, HOME=str(home), NKIPY_DOCS_REPO=str(ROOT),
               PYTHONPATH=str(ROOT), PATH=f"{ROOT / '.venv/bin'}:{os.environ.get('PATH', '')}")
    env.pop("XDG_CACHE_HOME", None)
    if lang == "python":
        cmd = [str(ROOT / ".venv/bin/python"), "-c", code]
    else:
        if lang == "console":
            code = "\n".join(l[2:] for l in code.splitlines() if l.startswith("$ ")) + "\n"
        cmd = ["bash", "-e", "-c", code]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path),
                             env=env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: timed out after {TIMEOUT_S}s")
    assert out.returncode == 0, f"{where}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    for want in re.findall(r"#\s*prints\s+(.+?)\s*$", code, re.M):
        assert want in out.stdout, f"{where}: expected output {want!r} not in:\n{out.stdout[-2000:]}"
