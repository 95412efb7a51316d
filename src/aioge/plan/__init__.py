"""Plans as data: what the compiler produces and the runtime runs, and how it is encoded.

The floor below compiler/ and cache/: ``KernelDesc``, ``StreamPlan``, ``MemoryPlan`` and
``CompiledModel`` (dataclasses), their codec, the ``.om`` format, and the checksummed
envelope and atomic files every cache file uses. It imports only ``ir`` and ``errors`` (and
the op registry, to bind kernels when an ``.om`` is decoded).
"""

__all__: list[str] = []
