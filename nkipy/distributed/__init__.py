"""nkipy.distributed: collective operations for kernels (see ``collectives``)."""
from nkipy.distributed.collectives import (all_gather, all_reduce, all_to_all, get_world_size,
                                           reduce_scatter)

__all__ = ["all_gather", "all_reduce", "reduce_scatter", "all_to_all", "get_world_size"]
