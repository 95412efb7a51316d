"""The stream plan as data: streams, the stream of every node, and the events between streams
(made by ``compiler.streams.plan_streams``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Event", "Stream", "StreamPlan"]


@dataclass(frozen=True, slots=True)
class Stream:
    id: int
    engine: str  # whose worker pool runs it (for a single mixed stream: the best engine among its nodes)
    nodes: tuple[int, ...]  # node indices in execution order


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    producer: int  # node index that records it
    consumer: int  # node index that waits for it


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """Streams, per-node stream ids, and the events between streams."""

    streams: tuple[Stream, ...]
    node_stream: tuple[int, ...]
    events: tuple[Event, ...]

    @property
    def num_streams(self) -> int:
        return len(self.streams)

    def waits(self, node: int) -> list[Event]:
        """The events node ``node`` waits for before it starts."""
        return [e for e in self.events if e.consumer == node]

    def records(self, node: int) -> list[Event]:
        """The events node ``node`` records when it ends."""
        return [e for e in self.events if e.producer == node]
