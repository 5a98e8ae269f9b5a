"""Small runtime queries of nkipy.runtime."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def is_neuron_compatible() -> bool:
    """True when the runtime sees at least one NeuronCore (``NEURON_RT_VISIBLE_CORES``,
    else all of the simulated device's cores), so kernels can run here; False
    (with the reason logged) when it sees none or the runtime cannot be
    loaded or refuses its configuration. Creates no runtime."""
    try:
        from spike._spike import Spike

        count = Spike.get_visible_neuron_core_count()
    except Exception as e:  # noqa: BLE001  (any failure: not usable here)
        log.warning("no NeuronCore usable: %s", e)
        return False
    if count < 1:
        log.info("no NeuronCore visible (NEURON_RT_VISIBLE_CORES)")
        return False
    return True
