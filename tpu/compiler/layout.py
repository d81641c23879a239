"""How the back end stores a tensor: the same rows in the unified buffer and
in host memory.

A tensor of a batch of ``B`` samples of ``(H, W, C)`` (a vector ``(C,)`` is
``(1, 1, C)``) is stored one pixel per row of ``R = config.rows`` bytes, its
channels across the row in blocks of ``R`` (block ``j`` holds channels
``j*R .. j*R + R - 1``; lanes past ``C`` hold the fill value and meet zero
weights). Rows are ordered block, then sample, then padded image row, then
padded column::

    row(b, y, x, j) = j * B * Hp * Wp + b * Hp * Wp + (y + top) * Wp + (x + left)

so a vector batch is column-blocked (`tpu.sim.stimulus.programs.blocked`: block ``j``
is ``B`` consecutive rows), an image is stored padded for the convolution
that reads it (padding pixels hold the zero point, a real zero), and one
ACT writes a run of consecutive output pixels. RHM and WHM copy these rows
unchanged, so a tensor spilled to host memory has the same bytes there.
"""

from dataclasses import asdict, dataclass

import numpy as np


__all__ = ["Layout", "im2col", "as_image"]


@dataclass(frozen=True)
class Layout:
    """Storage of a batch of one tensor (see the module docstring)."""
    height: int
    width: int
    channels: int
    lanes: int              # bytes per row: config.rows
    batch: int
    pad: tuple = (0, 0, 0, 0)   # top, left, bottom, right
    fill: int = 0           # the value of padding pixels and unused lanes
    unsigned: bool = False

    def __post_init__(self):
        object.__setattr__(self, "pad", tuple(int(p) for p in self.pad))

    @property
    def blocks(self):
        return -(-self.channels // self.lanes)

    @property
    def padded_h(self):
        return self.height + self.pad[0] + self.pad[2]

    @property
    def padded_w(self):
        return self.width + self.pad[1] + self.pad[3]

    @property
    def sample_stride(self):
        return self.padded_h * self.padded_w

    @property
    def block_stride(self):
        return self.batch * self.sample_stride

    @property
    def rows(self):
        return self.blocks * self.block_stride

    @property
    def nbytes(self):
        return self.rows * self.lanes

    def row(self, b, y, x, j):
        """Row offset of sample `b`, pixel (`y`, `x`) (unpadded coordinates,
        negative inside the top/left padding), channel block `j`."""
        return (j * self.block_stride + b * self.sample_stride
                + (y + self.pad[0]) * self.padded_w + (x + self.pad[1]))

    def pack(self, values):
        """Integer values ``(B, H, W, C)`` (or ``(B, C)``) -> the stored bytes."""
        v = np.asarray(values, dtype=np.int64).reshape(self.batch, self.height, self.width,
                                                       self.channels)
        t, l, _, _ = self.pad
        full = np.full((self.batch, self.padded_h, self.padded_w, self.blocks * self.lanes),
                       self.fill, dtype=np.int64)
        full[:, t:t + self.height, l:l + self.width, :self.channels] = v
        full = full.reshape(self.batch, self.padded_h, self.padded_w, self.blocks, self.lanes)
        return (full.transpose(3, 0, 1, 2, 4) & 0xFF).astype(np.uint8).tobytes()

    def unpack(self, data):
        """Stored bytes -> int64 values ``(B, H, W, C)``."""
        raw = np.frombuffer(bytes(data), dtype=np.uint8, count=self.nbytes)
        v = raw.view(np.uint8 if self.unsigned else np.int8).astype(np.int64)
        v = v.reshape(self.blocks, self.batch, self.padded_h, self.padded_w, self.lanes)
        v = v.transpose(1, 2, 3, 0, 4).reshape(self.batch, self.padded_h, self.padded_w, -1)
        t, l, _, _ = self.pad
        return v[:, t:t + self.height, l:l + self.width, :self.channels]

    def pad_runs(self, block, samples=None):
        """``(row offset, rows)`` runs of the padding rows of `block` (of
        every sample, or of `samples`): what must hold the fill value before
        the image is read."""
        t, l, b, r = self.pad
        if not any(self.pad):
            return []
        runs = []
        wp = self.padded_w
        for s in range(self.batch) if samples is None else samples:
            base = self.row(s, -t, -l, block)
            start = base
            for y in range(self.height):
                inner = base + (t + y) * wp + l
                if inner > start:
                    runs.append((start, inner - start))
                start = inner + self.width
            end = base + self.sample_stride
            if end > start:
                runs.append((start, end - start))
        return runs

    def to_json(self):
        return asdict(self)

    @classmethod
    def from_json(cls, d):
        return cls(**d)


def as_image(shape):
    """``(H, W, C)`` of a tensor shape (a vector is ``(1, 1, C)``)."""
    return tuple(shape) if len(shape) == 3 else (1, 1, int(shape[0]))


def im2col(values, kernel, stride, padding, fill, rows=None):
    """Patches of ``(B, H, W, C)`` for a convolution: ``(B, OH, OW, KH*KW*C)``
    in (dy, dx, c) order; padding pixels are `fill`. With `rows` (< KH, stride
    1 down), patches of `rows` kernel rows only, for ``OH + KH - rows`` rows
    of output positions (``(B, OH + KH - rows, OW, rows*KW*C)``): a
    ``(KH - rows + 1) x 1`` convolution over them finishes the kernel."""
    v = np.asarray(values, dtype=np.int64)
    batch, h, w, c = v.shape
    kh, kw = kernel
    sh, sw = stride
    t, l, b, r = padding
    full = np.full((batch, h + t + b, w + l + r, c), fill, dtype=np.int64)
    full[:, t:t + h, l:l + w] = v
    oh = (h + t + b - kh) // sh + 1
    ow = (w + l + r - kw) // sw + 1
    g = kh if rows is None else rows
    oh += kh - g
    out = np.empty((batch, oh, ow, g * kw * c), dtype=np.int64)
    for dy in range(g):
        for dx in range(kw):
            k = (dy * kw + dx) * c
            out[..., k:k + c] = full[:, dy:dy + (oh - 1) * sh + 1:sh, dx:dx + (ow - 1) * sw + 1:sw]
    return out
