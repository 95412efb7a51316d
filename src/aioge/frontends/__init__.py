"""Frontends: model formats in, ``aioge.Graph`` out. ``load_onnx`` reads ONNX models."""

from aioge.frontends.onnx import load_onnx

__all__ = ["load_onnx"]
