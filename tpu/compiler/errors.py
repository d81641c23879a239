"""Errors the compiler raises for models it cannot take.

All are `CompileError`, a `ValueError`, with a one-line message that says
what was wrong and, where it helps, what would be accepted.
"""

__all__ = ["CompileError", "UnsupportedModel", "ModelError"]


class CompileError(ValueError):
    """A model the compiler cannot compile."""


class UnsupportedModel(CompileError):
    """A well-formed quantized model that uses something the chip does not
    support: the message names the node (name and op type) and says what is
    supported."""

    def __init__(self, message, node=None, op_type=None, source=None):
        if node is not None or op_type is not None:
            message = f"node {node!r} ({op_type}): {message}"
        if source:
            message = f"{source}: {message}"
        super().__init__(message)
        self.node = node
        self.op_type = op_type


class ModelError(CompileError):
    """A file that is not a usable quantized model: float (unquantized),
    malformed or truncated."""
