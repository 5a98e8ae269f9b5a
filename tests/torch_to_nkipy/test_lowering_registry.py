"""The ATen op registry's naming and support rules (spike_torch/lowering/registry.py),
without tracing: names in every spelling map to one canonical name, a
``supports`` predicate decides per node, and bad registrations are refused.
Written for mutants of registry.py that survived `make mutation`'s selection."""
from __future__ import annotations

import operator

import pytest
import torch

from spike_torch.lowering import AtenOpRegistry, canonical_name, target_name


@pytest.mark.parametrize("spelling", ["torch.ops.aten.add.Tensor", "aten::add.Tensor",
                                      "aten.add.Tensor"])
def test_canonical_name_spellings(spelling) -> None:
    assert canonical_name(spelling) == "aten.add.Tensor"


def test_canonical_name_adds_default_overload() -> None:
    assert canonical_name("aten.relu") == "aten.relu.default"
    assert canonical_name("aten::relu") == "aten.relu.default"
    assert canonical_name("_operator.getitem") == "_operator.getitem"


def test_target_name_of_overload_packet_and_function() -> None:
    assert target_name(torch.ops.aten.add.Tensor) == "aten.add.Tensor"
    assert target_name(torch.ops.aten.relu) == "aten.relu.default"
    assert target_name(operator.getitem) == "_operator.getitem"


def test_register_needs_a_name() -> None:
    with pytest.raises(ValueError, match="AtenOpRegistry.register needs at least one op name"):
        AtenOpRegistry.register()


@pytest.fixture
def probe_name():
    """A registry name of this test only, removed again afterwards (the registry
    is process-wide; test_ops checks that every entry is tested)."""
    from spike_torch.lowering import registry

    name = "aten._rng_props_registry_probe.default"
    yield name
    registry._REGISTRY.pop(name, None)
    registry._SUPPORTS.pop(name, None)


def test_get_and_is_supported_with_a_predicate(probe_name) -> None:
    name = probe_name
    assert AtenOpRegistry.get(name) is None and not AtenOpRegistry.is_supported(name)

    def impl(x):
        return x
    entry = AtenOpRegistry.register("aten::_rng_props_registry_probe",
                                    supports=lambda node: node == "yes")(impl)
    # the registry keeps (and the decorator returns) impl wrapped to name its op
    # to the run-time checks it emits (nkipy.core.ops.op_context)
    assert AtenOpRegistry.get("torch.ops.aten._rng_props_registry_probe.default") is entry
    assert entry.__wrapped__ is impl and entry.__name__ == "impl" and entry(3) == 3
    assert name in list(AtenOpRegistry.names())
    assert AtenOpRegistry.is_supported(name)               # no node: the entry exists
    assert AtenOpRegistry.is_supported(name, "yes")
    assert not AtenOpRegistry.is_supported(name, "no")
    with pytest.raises(ValueError, match=r"ATen op 'aten._rng_props_registry_probe.default' "
                                         r"is already registered"):
        AtenOpRegistry.register(name)(impl)
