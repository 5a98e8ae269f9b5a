"""The README's first-screen PyTorch example runs as pasted (in a fresh
directory and process, with a private HOME so its default cache is its own)
and prints what its comment says."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _example() -> str:
    text = (ROOT / "README.md").read_text()
    marker = text.index("<!-- readme-example:")
    block = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert block, "the README's example block is missing"
    return block.group(1)


def test_readme_example_runs_as_pasted(tmp_path):
    code = _example()
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("XDG_CACHE_HOME", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(tmp_path), env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    want = re.search(r"# (nkipy:0 .*)$", code, re.M).group(1)
    assert out.stdout.strip().splitlines()[-1] == want, out.stdout
