"""Scale-out: compile many models at once, on local threads or on a Dask cluster.

``compile_many(models, options, client=None)`` fans the compiles out through an ``Executor``
(``submit``, ``aclose``; DESIGN decision 13): local threads by default, a Dask cluster with
``client=`` (the ``distributed`` extra). On a cluster every kernel key is compiled once
across all workers: a scheduler-side lock per key, and the compiled kernel published to the
scheduler before the lock is let go (``cluster.ClusterKernelStore``).
"""

from aioge.distributed.batch import BatchResult, compile_many
from aioge.distributed.executor import DaskExecutor, Executor, LocalExecutor

__all__ = ["BatchResult", "DaskExecutor", "Executor", "LocalExecutor", "compile_many"]
