"""Collectives usable inside kernels (``import nkipy.distributed.collectives as cc``).

``cc.all_reduce(x, replica_groups=[[0, 1]], reduce_op=np.add)``,
``cc.all_gather(x, all_gather_dim, replica_groups)``,
``cc.reduce_scatter(x, reduce_scatter_dim, replica_groups, reduce_op)``,
``cc.all_to_all(x, split_dimension, concat_dimension, replica_groups)``.
Traced, they are recorded in the IR; called on NumPy arrays they simulate the
collective with every rank holding the same data (identities for one rank).
``replica_groups=None`` means one group of all ``$WORLD_SIZE`` ranks.
"""
from nkipy.core.ops.collectives import (all_gather, all_reduce, all_to_all, get_world_size,
                                        normalize_reduce_op, normalize_replica_groups,
                                        reduce_scatter)

__all__ = ["all_gather", "all_reduce", "reduce_scatter", "all_to_all", "get_world_size",
           "normalize_reduce_op", "normalize_replica_groups"]
