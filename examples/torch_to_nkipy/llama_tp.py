"""Tensor parallelism with DTensor: a Hugging Face Llama sharded over the ranks
of the job with ``parallelize_module`` and compiled with
``torch.compile(backend="nkipy")``.

Run it with torchrun, on one host or several::

    torchrun --nproc_per_node=2 examples/torch_to_nkipy/llama_tp.py
    torchrun --nnodes=2 --node_rank=N --nproc_per_node=1 \\
        --master_addr=HOST0 --master_port=PORT examples/torch_to_nkipy/llama_tp.py

(plain ``python llama_tp.py`` runs it as a job of one rank). Each rank joins the
``"nkipy"`` process group, builds the same small LlamaForCausalLM (random weights
from a fixed seed: no model hub is reachable), moves it to its ``nkipy`` device
(the core ``LOCAL_RANK`` picks) and shards every decoder layer as PyTorch's tensor
parallel tutorial does: attention ``q_proj``/``k_proj``/``v_proj`` and MLP
``gate_proj``/``up_proj`` column-wise, ``o_proj`` and ``down_proj`` row-wise, over
a one-dimensional device mesh of every rank (the shard is the global rank's).
Each rank then compiles the model and generates ``NEW`` greedy tokens (static KV
cache); the all_reduce each row-wise layer ends with runs inside the compiled
kernels. Rank 0 also runs the unsharded model eagerly on the CPU (one process)
and compares: it prints both token lists and exits with status 1 when they
differ (or when the ranks disagree, or the prefill logits are off by more than
``TOL``).

Needs ``transformers``; exits with status 0 and a message when it is not installed.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

NEW = 8        # tokens generated
TOL = 1e-3     # largest prefill logit difference accepted (float32)


def build_model():
    """The model (LlamaForCausalLM, 2 layers, hidden 128, 8 query / 4 key-value heads,
    random weights from seed 0 with ``initializer_range=0.1`` so that greedy
    tokens vary, eval mode, on the CPU) and its prompt (1 x 12 token ids)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=64, initializer_range=0.1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 12))
    return model, prompt


def tp_plan():
    """The plan of one decoder layer (PyTorch's tensor parallel tutorial)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel()}


def unshardable(config, world):
    """Why ``config`` cannot be sharded over ``world`` ranks (None when it can)."""
    if config.num_key_value_heads % world or config.intermediate_size % world:
        return (f"the model's {config.num_key_value_heads} key-value heads and intermediate "
                f"size {config.intermediate_size} must divide among the {world} ranks")
    return None


def verdict(tokens, eager_tokens, err, everyone):
    """Whether the run matches eager, and the lines saying so: ``tokens`` (rank 0's)
    against ``eager_tokens``, the prefill logit difference ``err`` against ``TOL``,
    and every rank's tokens (``everyone``) against rank 0's."""
    lines = ["tokens (nkipy, tensor parallel): " + str(tokens),
             "tokens (eager, one process):     " + str(eager_tokens),
             f"max prefill logit difference: {err:.3e} (tolerance {TOL})"]
    ok = tokens == eager_tokens and err <= TOL
    for r, other in enumerate(everyone):
        if other != tokens:
            lines.append(f"rank {r} generated other tokens: {other}")
            ok = False
    lines.append("tokens and logits match eager" if ok else "MISMATCH against eager")
    return ok, lines


def generate(model, prompt):
    return model.generate(prompt, max_new_tokens=NEW, do_sample=False,
                          cache_implementation="static")


def main() -> int:
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("SKIPPED: transformers is not installed")
        return 0
    # generate()'s bookkeeping between compiled steps runs eagerly on the nkipy
    # device, partly through spike_torch's CPU fallback (once-per-op warnings)
    os.environ.setdefault("SPIKE_TORCH_FALLBACK_WARN", "0")
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    import torch_to_nkipy  # noqa: F401  (registers the "nkipy" process group)
    from torch_to_nkipy import init_nkipy_backend

    if "RANK" in os.environ:   # torchrun: the job's store, rank and world size
        dist.init_process_group("nkipy")
    else:                      # plain python: a job of one rank
        dist.init_process_group("nkipy", store=dist.HashStore(), rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE"))
    model, prompt = build_model()
    why = unshardable(model.config, world)
    if why is not None:
        print(why, file=sys.stderr)
        dist.destroy_process_group()
        return 2

    with torch.no_grad():
        if rank == 0:     # reference: the whole model, eager PyTorch on the CPU
            eager_logits = model(prompt).logits
            eager_tokens = generate(model, prompt)[0, prompt.shape[1]:].tolist()

        mesh = init_device_mesh("nkipy", (world,))
        model.to("nkipy")     # this rank's device: the core LOCAL_RANK picks
        for layer in model.model.layers:
            parallelize_module(layer, mesh, tp_plan())
        prompt_nk = prompt.to("nkipy")
        model.forward = torch.compile(model.forward, backend="nkipy")
        logits = model(prompt_nk).logits.cpu()
        tokens = generate(model, prompt_nk)[0, prompt.shape[1]:].tolist()

    everyone = [None] * world
    dist.all_gather_object(everyone, tokens)
    status = torch.zeros(1)
    if rank == 0:
        err = (logits - eager_logits).abs().max().item()
        print(f"{world} ranks, tensor parallel over {mesh}; reference: eager PyTorch on the "
              f"CPU, one process")
        ok, lines = verdict(tokens, eager_tokens, err, everyone)
        print("\n".join(lines))
        status[0] = 0 if ok else 1
    dist.broadcast(status, src=0)     # every rank exits with rank 0's verdict
    dist.destroy_process_group()
    return int(status.item())


if __name__ == "__main__":
    sys.exit(main())
