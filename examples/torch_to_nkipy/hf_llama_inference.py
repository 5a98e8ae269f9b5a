"""Hugging Face Llama (a small LlamaConfig with random weights: no model hub is
reachable) compiled with torch.compile(backend="nkipy"): prefill logits and greedy
generation with a static KV cache, checked against eager CPU, with timings.

Needs ``transformers`` (``pip install transformers``); exits with status 0 and a
message when it is not installed.
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:
    print("SKIPPED: transformers is not installed")
    sys.exit(0)

from torch_to_nkipy import init_nkipy_backend  # noqa: E402

init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE", "./nkipy_cache"))

config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=128)
torch.manual_seed(0)
model = LlamaForCausalLM(config).eval()
prompt = torch.randint(0, config.vocab_size, (1, 16))
NEW = 8

with torch.no_grad():
    t = time.perf_counter()
    eager_logits = model(prompt).logits
    t_eager_prefill = time.perf_counter() - t
    t = time.perf_counter()
    eager_tokens = model.generate(prompt, max_new_tokens=NEW, do_sample=False,
                                  cache_implementation="static")
    t_eager_gen = time.perf_counter() - t

    eager_forward = model.forward
    model.forward = torch.compile(eager_forward, backend="nkipy")
    t = time.perf_counter()
    logits = model(prompt).logits
    t_cold = time.perf_counter() - t
    t = time.perf_counter()
    logits = model(prompt).logits
    t_prefill = time.perf_counter() - t
    tokens = model.generate(prompt, max_new_tokens=NEW, do_sample=False,
                            cache_implementation="static")       # compiles the decode step
    t = time.perf_counter()
    tokens = model.generate(prompt, max_new_tokens=NEW, do_sample=False,
                            cache_implementation="static")
    t_gen = time.perf_counter() - t

err = (logits - eager_logits).abs().max().item()
print("tokens (nkipy):", tokens[0, prompt.shape[1]:].tolist())
print("tokens (eager):", eager_tokens[0, prompt.shape[1]:].tolist())
print(f"max prefill logit difference: {err:.3e}")
print(f"prefill: nkipy {t_prefill * 1e3:.2f} ms (first call {t_cold:.2f} s) / "
      f"eager {t_eager_prefill * 1e3:.2f} ms")
print(f"generate {NEW} tokens: nkipy {t_gen * 1e3:.1f} ms / eager {t_eager_gen * 1e3:.1f} ms")
assert torch.equal(tokens, eager_tokens) and err < 1e-3
