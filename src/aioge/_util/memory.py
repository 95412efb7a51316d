"""Anonymous mappings for weights: each its own, populated at once or as it is read.

Not in huge pages: with 2 MiB pages (MADV_HUGEPAGE where /proc/buddyinfo showed them free)
resnet18 ran 4-5% faster from the graph cache (12.49/12.59/12.62 -> 12.15/11.78/11.96 ms), but on
this VM a fresh huge page costs far more to fault in: resnet18's first run from the graph cache
took 64-321 ms against 70-81, BERT-base's 777 ms against 298."""

from __future__ import annotations

import mmap

__all__ = ["anonymous"]


def anonymous(size: int, *, populate: bool = True) -> mmap.mmap:
    """A private anonymous mapping of ``size`` bytes; ``populate``: every page in memory now
    (MAP_POPULATE is Linux's; elsewhere the pages come as they are touched)."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    return mmap.mmap(-1, size, flags=flags | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0))
