"""Tensor inputs a graph returns unchanged (the weights a training forward saves
for its backward) come back as the input tensors themselves, not as copies a
kernel writes on every call (backend._ObjectInputs)."""
import torch
import torch.fx

from torch_to_nkipy.backend import _ObjectInputs, compile_fx_graph

aten = torch.ops.aten


def _graph(build) -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    g.output(build(g, x, w))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_returned_weight_is_the_input_tensor(backend):
    """w read by the product and returned: it stays a graph input, leaves the
    graph's results, and the call returns the very tensor passed in."""
    gm = _graph(lambda g, x, w: (g.call_function(aten.mm.default, (x, w)), w))
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    run = compile_fx_graph(gm, example_inputs=[x, w])
    out, saved = run([x, w])
    assert saved is w
    torch.testing.assert_close(out, x @ w)
    outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert len(outs) == 1 and len([n for n in gm.graph.nodes if n.op == "placeholder"]) == 2


def test_input_only_returned_leaves_the_graph():
    gm = _graph(lambda g, x, w: (g.call_function(aten.add.Tensor, (x, 1.0)), w, x))
    strip = _ObjectInputs.strip(gm, [torch.ones(2), torch.ones(2)])
    assert strip is not None and strip.kept == [0] and strip.passthrough == [(1, 1), (2, 0)]
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"] == ["x"]


def test_mutated_input_stays_a_kernel_output():
    """An input the graph writes into (a kept input mutation) is not passed
    through: the result must be what the graph computed."""
    def build(g, x, w):
        y = g.call_function(aten.add.Tensor, (x, 1.0))
        g.call_function(aten.copy_.default, (w, y))
        return (y, w)
    assert _ObjectInputs.strip(_graph(build), [torch.ones(2), torch.ones(2)]) is None


def test_graph_returning_only_inputs_keeps_them():
    """Nothing left to compute: the graph stays as it was (no empty kernel)."""
    gm = _graph(lambda g, x, w: (w, x))
    assert _ObjectInputs.strip(gm, [torch.ones(2), torch.ones(2)]) is None
    assert len(next(n for n in gm.graph.nodes if n.op == "output").args[0]) == 2


def test_training_step_with_saved_weights_matches_eager(backend):
    """A training step whose forward saves its weights for the backward:
    gradients equal eager's, on the device."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 4)).to("nkipy")
    model.load_state_dict({k: v.to("nkipy") for k, v in ref.state_dict().items()})
    step = torch.compile(lambda m, x: m(x).square().sum(), backend="nkipy", dynamic=False)
    x = torch.randn(5, 8)
    for _ in range(2):
        model.zero_grad()
        step(model, x.to("nkipy")).backward()
    ref.zero_grad()
    ref(x).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)
