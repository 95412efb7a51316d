"""The graph compiler: specialise, optimise, assign engines, compile kernels, plan streams and memory."""

from aioge.compiler.graph import compile_graph
from aioge.compiler.kernel import KernelDesc
from aioge.compiler.memory import MemoryPlan
from aioge.compiler.model import CompiledModel, CompileStats, NodePlan
from aioge.compiler.streams import StreamPlan

__all__ = ["CompileStats", "CompiledModel", "KernelDesc", "MemoryPlan", "NodePlan", "StreamPlan", "compile_graph"]
