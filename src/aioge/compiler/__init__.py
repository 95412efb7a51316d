"""The graph compiler: specialise, optimise, assign engines, compile kernels, plan streams and memory.

What it produces (``CompiledModel`` and its plans) is data, defined in ``aioge.plan``."""

from aioge.compiler.graph import compile_graph
from aioge.plan.kernel import KernelDesc
from aioge.plan.memory import MemoryPlan
from aioge.plan.model import CompiledModel, CompileStats, NodePlan
from aioge.plan.streams import StreamPlan

__all__ = ["CompileStats", "CompiledModel", "KernelDesc", "MemoryPlan", "NodePlan", "StreamPlan", "compile_graph"]
