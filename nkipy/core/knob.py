"""``knob``: the original nkipy's placement and tiling hints on a tensor.

On Neuron hardware the hints steer the nkigen backend: which dimension maps onto
the partitions, which memory (HBM, PSUM, SBUF) holds the tensor, the tile sizes of
its loops and of a contraction. This stack's code generator targets CPU caches and
chooses its loop order, tiles and parallel dimension from the graph; the hints are
checked exactly (a wrong one is an error here too, where nkigen would reject it)
and then have no effect on the generated code. A kernel written with them runs
unchanged, traced or as plain NumPy.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

#: The memory spaces a hint may name, spelled as in the original.
MEM_SPACES = ("Hbm", "Psum", "Sbuf", "SharedHbm")


def _ndim(tensor: Any) -> int:
    shape = getattr(tensor, "shape", None)
    if shape is None:
        raise TypeError(f"knob() annotates an array or a traced tensor, got {type(tensor).__name__}")
    return len(shape)


def _sizes(name: str, value: Any, length: Optional[int]) -> None:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"knob(): {name} must be a list of positive ints, got {value!r}")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value):
        raise ValueError(f"knob(): {name} must be a list of positive ints, got {list(value)!r}")
    if length is not None and len(value) != length:
        raise ValueError(f"knob(): {name} has {len(value)} entries for a tensor of rank {length}")


def knob(tensor: Any, *, partition_dim: Optional[int] = None, mem_space: Optional[str] = None,
         tile_size: Optional[Sequence[int]] = None,
         reduction_tile: Optional[Sequence[int]] = None) -> Any:
    """Annotates ``tensor`` with hardware hints and returns it unchanged.

    Args:
        tensor: a NumPy array (plain NumPy run) or a traced tensor (inside a kernel).
        partition_dim: the dimension to spread over the partitions, in
            ``[-rank, rank)``.
        mem_space: one of ``"Hbm"``, ``"Psum"``, ``"Sbuf"``, ``"SharedHbm"``.
        tile_size: one positive tile size per dimension.
        reduction_tile: positive tile sizes of the contracted dimensions (K of a
            matmul).

    Raises TypeError or ValueError for a hint that is malformed. Valid hints do
    not change the generated code here (see the module's docstring).
    """
    rank = _ndim(tensor)
    if partition_dim is not None:
        if isinstance(partition_dim, bool) or not isinstance(partition_dim, int):
            raise TypeError(f"knob(): partition_dim must be an int, got {partition_dim!r}")
        if not -rank <= partition_dim < rank:
            raise ValueError(f"knob(): partition_dim {partition_dim} is out of range for a "
                             f"tensor of rank {rank}")
    if mem_space is not None and mem_space not in MEM_SPACES:
        raise ValueError(f"knob(): mem_space must be one of {', '.join(MEM_SPACES)}, "
                         f"got {mem_space!r}")
    if tile_size is not None:
        _sizes("tile_size", tile_size, rank)
    if reduction_tile is not None:
        _sizes("reduction_tile", reduction_tile, None)
    return tensor
