"""``aioge.ray``: aioge models on Ray Serve (``pip install 'aioge[ray]'``; README, "Ray Serve").

Each replica has its own Session and serves the app of ``aioge serve`` (``server.create_app``:
the same KServe v2 REST routes, request decoding and response encoding, ``/metrics``) as
its ASGI ingress; a replica takes traffic once its models have compiled, and one that fails
to load fails its deployment. Ray Serve's options (``num_replicas``, ``autoscaling_config``,
...) pass through. With the remote cache tier in the session options
(``aioge.remote_cache=redis://...``), a replica on another machine (or, with
``replica_cache``, in a cache folder of its own) loads what the first compiled from Redis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["AiogeReplica", "deployment"]


class AiogeReplica:
    """One Ray Serve replica of the models (the class ``deployment`` wraps in Ray's ingress)."""

    def __init__(
        self,
        paths: Sequence[str],
        repository: str | None,
        session_options: Mapping[str, str],
        graph_options: Mapping[str, str],
        replica_cache: str | None,
    ) -> None:
        self._args = (list(paths), repository, dict(session_options), dict(graph_options), replica_cache)

    def __serve_build_asgi_app__(self) -> Any:  # Ray calls it in the replica, once constructed
        from ray import serve

        from aioge.server import SessionBackend, create_app

        paths, repository, session_options, graph_options, replica_cache = self._args
        if replica_cache:  # a kernel cache of the replica's own, as on a machine of its own
            folder = Path(replica_cache) / serve.get_replica_context().replica_id.unique_id
            folder.mkdir(parents=True, exist_ok=True)
            session_options = {**session_options, "ge.op_compiler_cache_dir": str(folder)}
        backend = SessionBackend(session_options, graph_options)
        return create_app(paths, backend, repository=repository, wait_loaded=True)


def deployment(
    paths: Sequence[str] = (),
    *,
    repository: str | None = None,
    session_options: Mapping[str, str] | None = None,
    graph_options: Mapping[str, str] | None = None,
    replica_cache: str | None = None,
    name: str = "aioge",
    **ray_options: Any,
) -> Any:
    """A Ray Serve application serving ``paths`` (.onnx, .om) or a model ``repository`` as
    ``aioge serve`` does, for ``serve.run``. ``session_options`` and ``graph_options`` go to
    each replica's ``SessionBackend``; ``replica_cache`` gives each replica a kernel cache
    folder of its own under it; ``ray_options`` go to ``serve.deployment`` (``num_replicas``,
    ``autoscaling_config``, ``ray_actor_options``, ``max_ongoing_requests``, ...).

    Raises:
        AiogeError: a bad model path or option, before anything is deployed.
    """
    from ray import serve

    from aioge.options import check_options
    from aioge.server import served_models

    served_models(paths, repository)  # checked here, not in a replica's log
    check_options(session_options, "session")
    check_options(graph_options, "graph")
    ingress = serve.ingress()(AiogeReplica)
    args = (list(paths), repository, dict(session_options or {}), dict(graph_options or {}), replica_cache)
    wrapped: Any = serve.deployment(ingress, name=name, **ray_options)
    return wrapped.bind(*args)
