"""Models for the device pool's and the server's tests: the tiny MLP of the
session's RTL tests, a small NCHW convolution network with a host softmax,
and a copy of a compiled model whose first program faults on the chip."""

import copy
import dataclasses

import numpy as np

from tpu import TPUConfig
from tpu.compiler.artifact import ChipStep
from tpu.compiler.backend import compile_graph
from tpu.isa import Rw

from test_compiler_reference import small_graph
from test_session_rtl import tiny_mlp


def compiled_tiny(config=TPUConfig(), batch=4):
    return compile_graph(tiny_mlp(), config, batch)


def compiled_conv(config=TPUConfig(), batch=4):
    return compile_graph(small_graph(), config, batch)


def faulting(compiled):
    """`compiled` with an RW of a weight tile past weight memory before its
    first chip part: every run stops with WEIGHT_MEM_RANGE at instruction 0."""
    bad = copy.deepcopy(compiled)
    for i, step in enumerate(bad.steps):
        if isinstance(step, ChipStep):
            rw = Rw(tile=bad.config.weight_mem_tiles, count=1).encode()
            bad.steps[i] = dataclasses.replace(step, program=rw + step.program)
            return bad
    raise AssertionError("the model has no chip part")


def tiny_inputs(rng, samples):
    return rng.normal(size=(samples, 10)).astype(np.float32)


def conv_inputs(rng, samples):
    return rng.uniform(-6, 6, (samples, 2, 6, 6)).astype(np.float32)
