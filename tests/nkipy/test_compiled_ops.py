"""Every op case of op_cases.py, compiled to a NEFF and run on the device,
against NumPy (the same checks as the interpreter tests: outputs, dtypes and
mutated inputs, at the per-dtype tolerances stated in op_cases.py).

Collectives over more than one rank run in test_collectives_ranks.py, one
process per rank; here, in one process with a model loaded for one rank,
those cases check the error a user gets."""
import numpy as np
import pytest

from op_cases import ALL_CASES, case_id, check_case, graph_inputs
from nkipy.core.trace import trace
from nkipy.runtime import DeviceKernel
from spike import NrtError, SpikeTensor


def _multi_rank(case) -> bool:
    return case.id.startswith("collective-") and ("ranks2" in case.id or case.id == "collective-int")


LOCAL_CASES = [c for c in ALL_CASES if not _multi_rank(c)]
MULTI_RANK_CASES = [c for c in ALL_CASES if _multi_rank(c) and "error" not in c.id]


@pytest.fixture(scope="session")
def nkipy_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("nkipy_cache")


def device_executor(cache_dir):
    def run(graph, arrays):
        kernel = DeviceKernel.from_graph(graph, build_dir=cache_dir)
        inputs = {v.name: SpikeTensor.from_numpy(np.require(a, requirements="C"))
                  for v, a in zip(kernel.graph.inputs, arrays)}
        outs = kernel(inputs=inputs)
        return [outs[name].numpy() for name in kernel.graph.output_names]
    return run


@pytest.mark.parametrize("case", LOCAL_CASES, ids=case_id)
def test_compiled(case, nkipy_cache_dir):
    check_case(case, executor=device_executor(nkipy_cache_dir))


@pytest.mark.parametrize("case", MULTI_RANK_CASES, ids=case_id)
def test_multi_rank_collective_needs_the_job(case, nkipy_cache_dir):
    graph = trace(case.fn, *case.args, **case.kwargs)
    with pytest.raises(NrtError, match="a collective over several ranks in a model loaded with "
                                       "world size 1: load it with the job's rank and world size"):
        device_executor(nkipy_cache_dir)(graph, graph_inputs(case))
