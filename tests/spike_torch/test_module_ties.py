"""Tied parameters survive moving a module to the nkipy device and back.

PyTorch replaces every parameter with a new one when it moves across the
nkipy/CPU boundary; a weight shared by two modules (GPT-2's wte and lm_head)
became two tensors, and training on the device drifted from eager."""
from __future__ import annotations

import pytest
import torch

DEV = "nkipy"


def _tied_pair() -> torch.nn.Module:
    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight
    shared = torch.nn.Linear(3, 3)
    m = torch.nn.ModuleDict({"emb": emb, "head": head, "a": shared, "b": shared})
    m.register_buffer("buf", torch.arange(3.0))
    m.a.register_buffer("buf", m.buf)                    # a buffer held in two places
    return m


@pytest.mark.parametrize("move", [lambda m: m.to(DEV), lambda m: m.nkipy(),
                                  lambda m: m.to(DEV, torch.float16)])
def test_ties_survive_to_device_and_back(move):
    m = _tied_pair()
    weight = m.emb.weight.detach().clone()
    move(m)
    assert m.emb.weight.device.type == DEV and m.head.weight is m.emb.weight
    assert m.a.weight is m.b.weight and m.a.buf is m.buf
    torch.testing.assert_close(m.emb.weight.detach().cpu().float(), weight, rtol=1e-3, atol=1e-3)
    ids = {id(p) for p in m.parameters()}
    assert len(ids) == len(list(m.parameters())) == 3  # emb/head weight, a/b weight and bias
    m.cpu()
    assert m.emb.weight.device.type == "cpu" and m.head.weight is m.emb.weight
    assert m.a.buf is m.buf


def test_untied_modules_unchanged():
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)).to(DEV)
    assert m[0].weight is not m[1].weight and m[0].weight.device.type == DEV


def test_gpt2_sgd_steps_match_eager():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(cfg)
    dev = transformers.GPT2LMHeadModel(cfg)
    dev.load_state_dict(ref.state_dict())
    dev.to(DEV)
    assert dev.lm_head.weight is dev.transformer.wte.weight
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.5)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.5)
    for _ in range(5):
        losses = []
        for model, opt, x in ((ref, opt_ref, ids), (dev, opt_dev, ids.to(DEV))):
            opt.zero_grad()
            loss = model(x, labels=x).loss
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-5, losses
    for (name, p), q in zip(ref.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-5, msg=name)
