"""The disk caches: kernels (kernel_cache/) and compiled graphs (.idx/.om/.rdcpkt/weight/)."""

__all__: list[str] = []
