"""Hugging Face Llama (a small LlamaConfig with random weights: no model hub is
reachable) compiled with torch.compile(backend="nkipy") and run as a user of the
device would: weights and inputs moved to the ``nkipy`` PyTorch device
(``model.to("nkipy")``, ``prompt.to("nkipy")``). Prefill logits and greedy
generation with a static KV cache are checked against eager PyTorch on the CPU,
and both are timed.

Needs ``transformers`` (``pip install transformers``); exits with status 0 and a
message when it is not installed. ``build_model()`` is the model and prompt, also
used by bench/bench_torch_compile.py.
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

NEW = 8  # tokens generated


def build_model():
    """The example's model (LlamaForCausalLM, 2 layers, hidden 128, random weights
    from seed 0, eval mode, on the CPU) and its prompt (1 x 16 token ids)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 16))
    return model, prompt


def generate(model, prompt):
    return model.generate(prompt, max_new_tokens=NEW, do_sample=False,
                          cache_implementation="static")


def median_s(fn, repeat):
    import spiky

    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        spiky.flush()   # compiled calls on nkipy tensors return before their kernel ends
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("SKIPPED: transformers is not installed")
        return 0
    # generate()'s bookkeeping between two compiled steps (argmax, stopping criteria,
    # position ids) runs eagerly on the nkipy device, partly through spike_torch's
    # CPU fallback; its once-per-operator warnings would fill the output.
    os.environ.setdefault("SPIKE_TORCH_FALLBACK_WARN", "0")
    import spike_torch  # noqa: F401  (the "nkipy" PyTorch device)
    import spiky
    from torch_to_nkipy import init_nkipy_backend

    init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE"))
    model, prompt = build_model()

    with torch.no_grad():
        # Reference: eager PyTorch on the CPU.
        eager_logits = model(prompt).logits
        eager_tokens = generate(model, prompt)
        t_eager_prefill = median_s(lambda: model(prompt), 5)
        t_eager_gen = median_s(lambda: generate(model, prompt), 3)

        # The same model compiled, weights and inputs on the nkipy device.
        model.to("nkipy")
        prompt_nk = prompt.to("nkipy")
        model.forward = torch.compile(model.forward, backend="nkipy")
        t = time.perf_counter()
        logits = model(prompt_nk).logits                   # compiles the prefill
        spiky.flush()
        t_cold = time.perf_counter() - t
        t_prefill = median_s(lambda: model(prompt_nk), 5)
        t = time.perf_counter()
        tokens = generate(model, prompt_nk)                # compiles the static-cache steps
        spiky.flush()
        t_gen_cold = time.perf_counter() - t
        t_gen = median_s(lambda: generate(model, prompt_nk), 3)
        tokens = generate(model, prompt_nk)

    assert logits.device.type == "nkipy" and tokens.device.type == "nkipy", \
        (logits.device, tokens.device)
    logits, tokens = logits.cpu(), tokens.cpu()
    err = (logits - eager_logits).abs().max().item()
    print(f"model and prompt on {prompt_nk.device}; reference: eager PyTorch on the CPU, "
          f"{torch.get_num_threads()} threads")
    print("tokens (nkipy):", tokens[0, prompt.shape[1]:].tolist())
    print("tokens (eager):", eager_tokens[0, prompt.shape[1]:].tolist())
    print(f"max prefill logit difference: {err:.3e}")
    print(f"prefill: nkipy {t_prefill * 1e3:.2f} ms (first call, compiling: {t_cold:.2f} s) / "
          f"eager {t_eager_prefill * 1e3:.2f} ms")
    print(f"generate {NEW} tokens: nkipy {t_gen * 1e3:.1f} ms (first call, compiling: "
          f"{t_gen_cold:.2f} s) / eager {t_eager_gen * 1e3:.1f} ms")
    ok = torch.equal(tokens, eager_tokens) and err < 1e-3
    print("tokens and logits match eager" if ok else "MISMATCH against eager")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
