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
- A block of any language marked `<!-- file: NAME -->` on the line just
  before its fence is not run: its text is written to NAME, and a block marked
  `<!-- continues -->` runs after it in the same directory. A walk-through
  (write a C file, build it, run it) is so one test: the chain of blocks from
  its first to its last `continues`, run in order, named after its first
  block.
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


def _marker(line: str, name: str) -> "str | None":
    m = re.match(r"<!--\s*" + name + r"(?::\s*(.*?))?\s*-->$", line.strip())
    return None if m is None else (m.group(1) or "")


def _blocks(root: Path):
    """Each block as (where, lang, code, fragment reason, file name, continues)."""
    for md in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
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
            prev = lines[start - 1] if start else ""
            fname = _marker(prev, "file")
            if lang in LANGS or fname:
                yield (f"{md.relative_to(root)}:{start + 1}", lang,
                       "\n".join(lines[start + 1:j]) + "\n", _marker(prev, "fragment"),
                       fname, _marker(prev, "continues") is not None)
            i = j + 1


def _chains(root: Path = ROOT):
    """Blocks grouped into the chains that run in one directory (see above)."""
    chains = []
    for where, lang, code, fragment, fname, cont in _blocks(root):
        same_file = chains and chains[-1][0][0].split(":")[0] == where.split(":")[0]
        if cont and not same_file:
            raise AssertionError(f"{where}: marked continues, but no block above it in its file")
        if cont:
            chains[-1].append((where, lang, code, fragment, fname))
        else:
            chains.append([(where, lang, code, fragment, fname)])
    for chain in chains:
        if all(b[4] is not None for b in chain):
            raise AssertionError(f"{chain[0][0]}: written to a file, but no block below it "
                                 f"is marked continues")
    return chains


CHAINS = _chains()


def _run(where: str, lang: str, code: str, cwd: Path, env: dict) -> None:
    if lang == "python":
        cmd = [str(ROOT / ".venv/bin/python"), "-c", code]
    else:
        if lang == "console":
            code = "\n".join(l[2:] for l in code.splitlines() if l.startswith("$ ")) + "\n"
        cmd = ["bash", "-e", "-c", code]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(cwd),
                             env=env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: timed out after {TIMEOUT_S}s")
    assert out.returncode == 0, f"{where}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    for want in re.findall(r"#\s*prints\s+(.+?)\s*$", code, re.M):
        assert want in out.stdout, f"{where}: expected output {want!r} not in:\n{out.stdout[-2000:]}"


@pytest.mark.parametrize("chain", CHAINS, ids=[c[0][0] for c in CHAINS])
def test_doc_block_runs(chain, tmp_path):
    for where, _, _, fragment, _ in chain:
        if fragment is not None:
            pytest.skip(f"{where}: fragment: {fragment}")
    home = tmp_path / "home"
    home.mkdir()
    for name in ("build", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ, HOME=str(home), NKIPY_DOCS_REPO=str(ROOT),
               PYTHONPATH=str(ROOT), PATH=f"{ROOT / '.venv/bin'}:{os.environ.get('PATH', '')}")
    env.pop("XDG_CACHE_HOME", None)
    for where, lang, code, _, fname in chain:
        if fname is not None:
            (tmp_path / fname).write_text(code)
        else:
            _run(where, lang, code, tmp_path, env)


@pytest.mark.parametrize("text,message", [
    ("intro\n\n<!-- continues -->\n```sh\ntrue\n```\n",
     "README.md:4: marked continues, but no block above it in its file"),
    ("<!-- file: a.c -->\n```c\nint x;\n```\n",
     "README.md:2: written to a file, but no block below it is marked continues"),
])
def test_chain_markers_are_checked(tmp_path, text, message):
    """A misplaced marker is an error naming its block, never a silently
    separate or skipped test."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(text)
    with pytest.raises(AssertionError, match=re.escape(message)):
        _chains(tmp_path)
