"""Graph-level passes run before code generation.

* ``simplify``: removes no-op nodes (cast to the same dtype, reshape or
  broadcast to the same shape, identity transposes, full slices) and folds a
  transpose of a transpose into one.
* ``cse``: merges nodes computing the same op on the same operands.
* ``fold_constants``: evaluates nodes whose operands are all constants
  (with the IR interpreter) when the result is small.
* ``dce``: drops nodes nothing depends on.

Each pass mutates the graph in place and returns how many nodes it changed.
"""
from __future__ import annotations

import logging

import numpy as np

from nkipy.core.ir import COLLECTIVES, Graph, Node, Value

log = logging.getLogger(__name__)

#: Largest constant (in elements) that folding may create.
FOLD_LIMIT = 1 << 16


def _replace_uses(graph: Graph, old: Value, new: Value) -> None:
    for n in graph.nodes:
        n.inputs = [new if v is old else v for v in n.inputs]
    graph.outputs = [new if v is old else v for v in graph.outputs]


def _is_noop(n: Node) -> bool:
    src = n.inputs[0] if n.inputs else None
    if src is None or len(n.outputs) != 1:
        return False
    out = n.output
    if src.shape != out.shape or src.dtype != out.dtype:
        return False
    if n.op in ("cast", "reshape", "broadcast_to"):
        return True
    if n.op == "transpose":
        return tuple(n.attrs["perm"]) == tuple(range(src.ndim))
    if n.op == "slice":
        return all(st == 1 for st in n.attrs["steps"]) and all(
            s == 0 for s in n.attrs["starts"])
    return False


def _fold_transposes(n: Node) -> bool:
    """A transpose of a transpose becomes one transpose of the first's operand
    (an identity, then removed as a no-op): AOTAutograd's backward transposes a
    product twice (``permute(permute(mm(a, b)))``), and the double view hid the
    product from the GEMM fusions."""
    if n.op != "transpose" or not n.inputs:
        return False
    m = n.inputs[0].node
    if m is None or m.op != "transpose" or len(m.outputs) != 1:
        return False
    inner, outer = list(m.attrs["perm"]), list(n.attrs["perm"])
    n.inputs = [m.inputs[0]]
    n.attrs = dict(n.attrs, perm=tuple(inner[i] for i in outer))
    return True


def simplify(graph: Graph) -> int:
    """Removes nodes that return their operand unchanged; folds transposes of
    transposes."""
    changed = 0
    keep = []
    for n in graph.nodes:
        changed += _fold_transposes(n)
        if _is_noop(n):
            _replace_uses(graph, n.output, n.inputs[0])
            changed += 1
        else:
            keep.append(n)
    graph.nodes = keep
    return changed


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(_attr_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _attr_key(x)) for k, x in v.items()))
    if isinstance(v, np.dtype):
        return ("dt", v.str)
    return v


def cse(graph: Graph) -> int:
    """Common-subexpression elimination over side-effect-free nodes."""
    seen: dict = {}
    changed = 0
    keep = []
    for n in graph.nodes:
        if n.op in COLLECTIVES:
            keep.append(n)
            continue
        key = (n.op, tuple(v.id for v in n.inputs), _attr_key(n.attrs),
               tuple((v.shape, v.dtype.str) for v in n.outputs))
        prior = seen.get(key)
        if prior is None:
            seen[key] = n
            keep.append(n)
            continue
        for old, new in zip(n.outputs, prior.outputs):
            _replace_uses(graph, old, new)
        changed += 1
    graph.nodes = keep
    return changed


def _evaluate(interp, node: Node, operands: list) -> list:
    """Runs one node on constant operands with the reference interpreter."""
    g = Graph("fold")
    ins = [g.add_input(f"c{i}", np.shape(a), np.asarray(a).dtype) for i, a in enumerate(operands)]
    clone = g.add(node.op, ins, node.attrs, [(o.shape, o.dtype) for o in node.outputs])
    g.outputs = list(clone.outputs)
    g.output_names = [f"output{i}" for i in range(len(g.outputs))]
    return list(interp.run_graph(g, *[np.asarray(a) for a in operands]))


def fold_constants(graph: Graph) -> int:
    """Replaces nodes whose operands are all constants by a constant node."""
    from nkipy.core import interp

    changed = 0
    new_nodes = []
    for n in graph.nodes:
        producers = [v.node for v in n.inputs]
        foldable = (
            n.inputs
            and n.op not in COLLECTIVES
            and all(p is not None and p.op == "constant" for p in producers)
            and all(o.size <= FOLD_LIMIT for o in n.outputs)
            # a division by a zero constant that must fail stays for run time
            and not (n.attrs.get("zero_div") == "raise"
                     and not np.all(np.asarray(producers[1].attrs["value"])))
            # PyTorch's 8-bit float conversions are not NumPy's (the interpreter's)
            and n.attrs.get("float8") != "torch"
        )
        if not foldable:
            new_nodes.append(n)
            continue
        try:
            values = _evaluate(interp, n, [p.attrs["value"] for p in producers])
        except Exception as exc:  # leave it to run-time code
            log.debug("not folding %s: %s", n.op, exc)
            new_nodes.append(n)
            continue
        for out, val in zip(n.outputs, values):
            c = Node("constant", [], {"value": np.asarray(val, dtype=out.dtype).reshape(out.shape)},
                     [], n.location)
            new = Value(out.shape, out.dtype, c, 0)
            c.outputs.append(new)
            new_nodes.append(c)
            _replace_uses(graph, out, new)
        changed += 1
    graph.nodes = new_nodes
    return changed


def dce(graph: Graph) -> int:
    """Drops nodes whose results nothing uses."""
    live = {v.id for v in graph.outputs}
    keep = []
    for n in reversed(graph.nodes):
        if any(o.id in live for o in n.outputs):
            keep.append(n)
            live.update(v.id for v in n.inputs)
    removed = len(graph.nodes) - len(keep)
    graph.nodes = list(reversed(keep))
    return removed


def optimize(graph: Graph) -> Graph:
    """Runs the passes to a fixed point (bounded) and verifies the result."""
    for _ in range(8):
        changed = simplify(graph) + cse(graph) + fold_constants(graph) + dce(graph)
        if not changed:
            break
    graph.verify()
    return graph
