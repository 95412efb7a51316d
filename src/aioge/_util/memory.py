"""Anonymous mappings for weights: each its own, populated at once or as it is read, and in
2 MiB pages where the kernel has them free at hand (a weight streamed every run then costs a
TLB entry per 2 MiB, not per 4 KiB)."""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["anonymous", "free_huge_pages"]

_PMD = 1 << 21  # a huge page
_MADV_POPULATE_WRITE = 23  # Linux 5.14: fault every page in now, writable (huge where advised)


def free_huge_pages() -> int:
    """How many 2 MiB blocks the kernel's page allocator holds free now (orders 9 and up in
    ``/proc/buddyinfo``): huge pages it can hand out without compacting memory; 0 where unknown."""
    try:
        with open("/proc/buddyinfo") as f:
            rows = [line.split()[4:] for line in f]
    except OSError:
        return 0
    return sum(int(c) << (order - 9) for row in rows for order, c in enumerate(row) if order >= 9 and c.isdigit())


def anonymous(size: int, *, huge: bool = False, populate: bool = True) -> mmap.mmap:
    """A private anonymous mapping of at least ``size`` bytes; ``populate``: every page in memory
    now (MAP_POPULATE is Linux's; elsewhere the pages come as they are touched). ``huge``: in
    2 MiB pages (its size rounded up to them) where the allocator holds twice as many free, so
    no fault waits on compaction: where the defrag policy is "madvise", asking for huge pages
    regardless stalled a process's first 440 MB buffer 0.6-4.3 s."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    if huge and advise is not None and 2 * -(-size // _PMD) <= free_huge_pages():
        m = mmap.mmap(-1, -(-size // _PMD) * _PMD, flags=flags)
        for option in (advise, _MADV_POPULATE_WRITE) if populate else (advise,):
            try:
                m.madvise(option)
            except OSError:  # a kernel without THP (EINVAL) or before 5.14: 4 KiB pages, a byte written a page
                if option != advise:
                    np.frombuffer(m, np.uint8)[:: mmap.PAGESIZE] = 0
        return m
    return mmap.mmap(-1, size, flags=flags | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0))
