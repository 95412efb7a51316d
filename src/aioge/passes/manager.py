"""The pass table and the manager that runs it to a fixed point.

``PASSES`` is the fixed order: clean-ups and folding first (they expose patterns), then the
pattern fusions from the most specific to the most general, elementwise fusion last (it
would otherwise swallow the activations and bias adds the specific fusions want). QDQ fusion
comes before them all (folding would make the weights' DequantizeLinear float constants). The
table repeats until a whole round changes nothing, because a fusion can expose a fold or a
common subexpression and the other way round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Mapping

from aioge.errors import CompileError, GraphError
from aioge.ir.graph import Graph
from aioge.passes import batchnorm, cleanup, cse, elementwise, fold, linear, patterns, quant

__all__ = ["PASSES", "GraphPass", "pass_names", "run_passes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GraphPass:
    """A named graph pass: ``run(graph)`` edits the graph in place and returns True if it changed it."""

    name: str
    default: bool
    doc: str
    run: Callable[[Graph], bool]


PASSES: tuple[GraphPass, ...] = (
    GraphPass(
        "QdqFusionPass",
        True,
        "fuse DequantizeLinear -> Conv/MatMul/Gemm [-> Relu] -> QuantizeLinear into QLinearConv/QLinearMatMul/QGemm (int8)",
        quant.fuse_qdq,
    ),
    GraphPass(
        "DynamicQuantizeMatMulFusionPass",
        True,
        "fuse DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add] into DynamicQuantizeMatMul (int8, float out)",
        quant.fuse_dynamic_matmul,
    ),
    GraphPass(
        "ConstantFoldingPass",
        True,
        "evaluate nodes whose inputs are known (incl. static Shape chains) into constants",
        fold.constant_folding,
    ),
    GraphPass(
        "IdentityRemovalPass", True, "remove Identity, inference-mode Dropout and same-type Cast nodes", cleanup.remove_identity
    ),
    GraphPass(
        "CommonSubexpressionEliminationPass",
        True,
        "merge equal constants and nodes computing the same thing",
        cse.common_subexpressions,
    ),
    GraphPass("DeadCodeEliminationPass", True, "remove nodes whose outputs reach no graph output", cleanup.dead_code),
    GraphPass(
        "GeluFusionPass", True, "replace the decomposed erf Gelu (Div, Erf, Add, Mul, Mul) by one Gelu", patterns.fuse_gelu
    ),
    GraphPass("SwishFusionPass", True, "replace Mul(x, Sigmoid(x)) (SiLU) by one Swish", patterns.fuse_swish),
    GraphPass(
        "HardSigmoidFusionPass", True, "Clip(x + b, 0, h) / h as HardSigmoid, x * it HardSwish", patterns.fuse_hard_sigmoid
    ),
    GraphPass(
        "LayerNormFusionPass",
        True,
        "replace the decomposed LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div[, Mul, Add]) by one",
        patterns.fuse_layer_norm,
    ),
    GraphPass(
        "ConvBatchNormFusionPass",
        True,
        "fold BatchNormalization and per-channel Mul into the weights of the Conv or Gemm before it",
        batchnorm.fold_batch_norm,
    ),
    GraphPass(
        "BatchNormDecompositionPass",
        True,
        "rewrite a BatchNormalization that cannot fold into weights as a per-channel Mul and Add",
        batchnorm.decompose_batch_norm,
    ),
    GraphPass(
        "TransposeMatMulFusionPass",
        True,
        "fold last-two-axes Transposes into MatMul/Gemm as transA/transB, Tensordot's row Reshapes around a MatMul away",
        linear.fold_transposes,
    ),
    GraphPass(
        "MatMulAddFusionPass",
        True,
        "rewrite MatMul + Add as Gemm on matrices, as FusedMatMul with a bias on batches of rows",
        linear.fuse_matmul_add,
    ),
    GraphPass("BiasAddFusionPass", True, "fold a bias Add into the Conv bias or the Gemm C before it", linear.fuse_bias_add),
    GraphPass(
        "ResidualAddFusionPass",
        True,
        "fold a residual Add into the Conv before it (FusedConv's Z, added by the conv kernel)",
        linear.fuse_residual,
    ),
    GraphPass(
        "ActivationFusionPass",
        True,
        "fuse Relu/LeakyRelu/Clip/Sigmoid/HardSigmoid/HardSwish/Swish/Tanh/Gelu into the Conv, Gemm or MatMul before it",
        linear.fuse_activation,
    ),
    GraphPass(
        "SqueezeExciteFusionPass",
        True,
        "replace a squeeze-and-excitation block (GlobalAveragePool, two 1x1 convs, the channel Mul) by one SqueezeExcite",
        patterns.fuse_squeeze_excite,
    ),
    GraphPass(
        "ChannelShuffleFusionPass",
        True,
        "replace a channel shuffle (Reshape, Transpose of the group axes, Reshape back; the Concat before it) by one ChannelShuffle",
        patterns.fuse_channel_shuffle,
    ),
    GraphPass(
        "DuplicateFilterPass",
        True,
        "compute repeated (filter, bias) pairs of a Conv with constant weights once and Gather the channels",
        linear.dedup_filters,
    ),
    GraphPass(
        "ElementwiseFusionPass",
        True,
        "fuse chains of elementwise ops into one blocked FusedElementwise kernel",
        elementwise.fuse_elementwise,
    ),
)

_MAX_ROUNDS = 8


def pass_names() -> tuple[str, ...]:
    """Every pass name, in the order the passes run."""
    return tuple(p.name for p in PASSES)


def run_passes(graph: Graph, switch: Mapping[str, bool]) -> list[str]:
    """Run the enabled passes in order, repeating the table until no pass changes the graph.

    ``switch`` maps pass names to on/off (``ge.optimizationSwitch``); a pass not named runs
    when its default is on. Returns the names of the passes that changed something, in the
    order they first did.

    Raises:
        CompileError: a pass left the graph malformed or renamed an output (a bug in that
            pass; the message names it).
    """
    enabled = [p for p in PASSES if switch.get(p.name, p.default)]
    outputs = [v.name for v in graph.outputs]
    applied: list[str] = []
    before = len(graph.nodes)
    for round_ in range(_MAX_ROUNDS):
        changed = False
        for p in enabled:
            if not p.run(graph):
                continue
            changed = True
            if p.name not in applied:
                applied.append(p.name)
            log.debug("pass %s changed graph %s (round %d, %d nodes)", p.name, graph.name, round_, len(graph.nodes))
            _check(graph, p.name, outputs)
        if not changed:
            break
    log.debug("passes on graph %s: %d -> %d nodes, applied %s", graph.name, before, len(graph.nodes), applied)
    return applied


def _check(graph: Graph, name: str, outputs: list[str]) -> None:
    try:
        graph.validate()
    except GraphError as exc:
        raise CompileError(f"pass {name} left the graph malformed: {exc}", graph=graph.name) from exc
    now = [v.name for v in graph.outputs]
    if now != outputs:
        raise CompileError(f"pass {name} changed the graph outputs from {outputs} to {now}", graph=graph.name)
