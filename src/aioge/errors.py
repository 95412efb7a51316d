"""The aioge error hierarchy: every error aioge raises on purpose is one of these.

Each error names what is at fault (graph, node, option, input or file), the value seen and
what was expected. Where GE has a user-facing code for the same fault, the error carries it
in ``code`` and its message starts with it, so GE users recognise it.
"""

from __future__ import annotations

__all__ = [
    "AiogeError",
    "CacheError",
    "CompileError",
    "ConfigError",
    "ExecutionError",
    "FeedError",
    "GraphError",
    "GraphIdError",
    "ModelFormatError",
    "OptionError",
    "SessionClosedError",
    "UnsupportedOpError",
]


class AiogeError(Exception):
    """Base of every error aioge raises on purpose."""

    code: str | None = None

    def __init__(self, message: str, *, code: str | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(f"{self.code}: {message}" if self.code else message)


class OptionError(AiogeError, ValueError):
    """Raised when an option key is unknown, its value is invalid, or it is given at the wrong level."""

    code = "E10001"

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__(f"Value {value!r} for parameter {key!r} is invalid. Reason: {reason}")


class GraphError(AiogeError, ValueError):
    """Raised when a graph is malformed: a cycle, a dangling input, a duplicate name, a bad shape or dtype."""

    def __init__(self, message: str, *, graph: str | None = None, node: str | None = None) -> None:
        self.graph = graph
        self.node = node
        where = []
        if graph is not None:
            where.append(f"graph {graph!r}")
        if node is not None:
            where.append(f"node {node!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class GraphIdError(GraphError, TypeError):
    """Raised when a graph id is not an int in GE's range (a uint32: 0 <= id < 2**32)."""


class UnsupportedOpError(GraphError):
    """Raised when a model uses op types aioge does not implement; lists all of them at once."""

    def __init__(self, ops: list[tuple[str, str]], *, graph: str | None = None, nodes: list[str] | None = None) -> None:
        self.ops = sorted(set(ops))
        self.nodes = list(nodes or [])
        listed = ", ".join(f"{d or 'ai.onnx'}::{t}" for d, t in self.ops)
        more = f" and {len(self.nodes) - 8} more" if len(self.nodes) > 8 else ""
        at = f" (at nodes {', '.join(self.nodes[:8])}{more})" if self.nodes else ""
        super().__init__(f"unsupported op types: {listed}{at}", graph=graph)


class CompileError(AiogeError):
    """Raised when a graph cannot be compiled: no engine for a node, a kernel that fails to build, a bad cache dir."""

    def __init__(
        self,
        message: str,
        *,
        graph: str | None = None,
        nodes: list[str] | None = None,
        code: str | None = None,
    ) -> None:
        self.graph = graph
        self.nodes = list(nodes or [])
        prefix = f"graph {graph!r}: " if graph is not None else ""
        super().__init__(prefix + message, code=code)


class FeedError(AiogeError, ValueError):
    """Raised when the feeds of a run are missing, extra, or of the wrong shape or dtype."""

    def __init__(self, message: str, *, graph: str | None = None, input: str | None = None) -> None:
        self.graph = graph
        self.input = input
        prefix = f"graph {graph!r}: " if graph is not None else ""
        super().__init__(prefix + message)


class ExecutionError(AiogeError, RuntimeError):
    """Raised when a kernel fails during a run; names the node, its op type and its engine."""

    def __init__(
        self,
        message: str,
        *,
        graph: str | None = None,
        node: str | None = None,
        op_type: str | None = None,
        engine: str | None = None,
    ) -> None:
        self.message = message
        self.graph = graph
        self.node = node
        self.op_type = op_type
        self.engine = engine
        where = []
        if graph is not None:
            where.append(f"graph {graph!r}")
        if node is not None:
            where.append(f"node {node!r} ({op_type} on {engine})")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class SessionClosedError(AiogeError, RuntimeError):
    """Raised when a closed session is used, or by a run that was in flight when its session closed.

    A run that had not finished its last op when ``aclose()`` began fails with it promptly
    (in sink, host and device modes alike) instead of waiting for engines that are gone.
    """

    def __init__(self, message: str = "the session is closed", *, graph: str | None = None) -> None:
        self.graph = graph
        super().__init__(f"graph {graph!r}: {message}" if graph is not None else message)


class CacheError(AiogeError):
    """Raised when a cache file is corrupt, truncated, foreign or from another version.

    Inside a session a cache error is never fatal: it is logged as a warning and the graph
    or kernel is recompiled. Tools that read one file (``aioge info``) raise it.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class ModelFormatError(CacheError):
    """Raised when a compiled model file (.om) cannot be decoded or does not match this aioge."""


class ConfigError(AiogeError, ValueError):
    """Raised for a model repository's config file (``config.toml``) or layout at fault: the
    message names the file, the field and what was expected."""

    def __init__(self, path: str, field: str, reason: str) -> None:
        self.path, self.field = path, field
        super().__init__(f"{path}: {field}: {reason}")
