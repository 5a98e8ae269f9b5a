"""Llama-architecture inference (random weights): greedy generation with a static
KV cache, compiled with torch.compile(backend="nkipy") and checked token by token
against eager PyTorch. (Hugging Face ``transformers`` is not installed here, so the
model is written out: RMSNorm, rotary embeddings, grouped causal attention over a
KV cache updated in place, SwiGLU MLP.)"""
import copy
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from torch_to_nkipy import init_nkipy_backend  # noqa: E402

init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE"))

VOCAB, DIM, HEADS, LAYERS, MAX_LEN, FFN = 256, 64, 4, 2, 32, 128
HD = DIM // HEADS


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.gate = nn.Linear(DIM, FFN, bias=False)
        self.up = nn.Linear(DIM, FFN, bias=False)
        self.down = nn.Linear(FFN, DIM, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, HEADS, MAX_LEN, HD))
        self.register_buffer("v_cache", torch.zeros(1, HEADS, MAX_LEN, HD))

    def forward(self, h, pos, cos, sin, mask):
        b, s, _ = h.shape
        x = self.attn_norm(h)
        q = self.q(x).view(b, s, HEADS, HD).transpose(1, 2)
        k = self.k(x).view(b, s, HEADS, HD).transpose(1, 2)
        v = self.v(x).view(b, s, HEADS, HD).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        att = (q @ self.k_cache.transpose(-1, -2)) * HD ** -0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        h = h + self.o((att @ self.v_cache).transpose(1, 2).reshape(b, s, DIM))
        x = self.mlp_norm(h)
        return h + self.down(F.silu(self.gate(x)) * self.up(x))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD)))

    def forward(self, ids, pos):
        f = pos[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.arange(MAX_LEN)[None, :] <= pos[:, None]
        h = self.emb(ids)
        for layer in self.layers:
            h = layer(h, pos, cos, sin, mask)
        return self.lm_head(self.norm(h))


def generate(model, prompt, steps):
    logits_seen, tokens, times = [], [], []
    with torch.no_grad():
        t = time.perf_counter()
        logits = model(prompt, torch.arange(prompt.shape[1]))
        times.append(time.perf_counter() - t)
        for step in range(steps):
            tok = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(tok))
            logits_seen.append(logits[:, -1])
            t = time.perf_counter()
            logits = model(tok, torch.tensor([prompt.shape[1] + step]))
            times.append(time.perf_counter() - t)
    return tokens, logits_seen, times


torch.manual_seed(0)
eager = Llama()
model = copy.deepcopy(eager)
compiled = torch.compile(model, backend="nkipy", fullgraph=True)
prompt = torch.randint(0, VOCAB, (1, 8))
tok_c, log_c, t_c = generate(compiled, prompt, 8)
tok_e, log_e, t_e = generate(eager, prompt, 8)
print("tokens (nkipy):", tok_c)
print("tokens (eager):", tok_e)
err = max((a - b).abs().max().item() for a, b in zip(log_c, log_e))
print(f"max logit difference: {err:.3e}")
print(f"prefill: nkipy {t_c[0] * 1e3:.2f} ms (first call, compiles) / eager {t_e[0] * 1e3:.2f} ms")
print(f"decode step: nkipy {min(t_c[2:]) * 1e3:.3f} ms / eager {min(t_e[2:]) * 1e3:.3f} ms")
assert tok_c == tok_e and err < 1e-3
