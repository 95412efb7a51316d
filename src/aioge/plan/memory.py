"""The memory plan as data: arena offsets of the planned tensors (made by ``compiler.memory.plan_memory``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Buffer", "MemoryPlan"]


@dataclass(frozen=True, slots=True)
class Buffer:
    value: str
    offset: int
    nbytes: int
    producer: int  # node index
    last_use: int  # node index of the last consumer in execution order (or producer)


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Arena offsets for the planned tensors, and the figures to judge the plan by."""

    arena_bytes: int
    buffers: tuple[Buffer, ...]
    lower_bound_bytes: int  # heaviest set of tensors live together under the stream plan
    no_reuse_bytes: int  # every tensor in its own region
    reuse: bool = True
    strategy: str = ""  # the placement order and gap rule that won

    def offsets(self) -> dict[str, tuple[int, int]]:
        """Value name -> (offset, nbytes) in the arena."""
        return {b.value: (b.offset, b.nbytes) for b in self.buffers}
