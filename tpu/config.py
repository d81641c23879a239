"""`TPUConfig`: the one description of a chip's sizes.

The RTL generators, the golden models, the test harness and the command line
all read the same frozen, validated `TPUConfig`, so a size can never disagree
between them.
"""

from dataclasses import dataclass, fields, asdict


__all__ = ["TPUConfig", "ConfigError"]


class ConfigError(ValueError):
    """A `TPUConfig` field has a value outside its allowed range."""


# field name -> (smallest, largest, meaning)
_RANGES = {
    "rows":              (1, 256,      "rows of the systolic array (the K dimension of a tile)"),
    "cols":              (1, 256,      "columns of the systolic array (output channels of a tile)"),
    "acc_rows":          (1, 1 << 16,  "rows of the accumulator memory"),
    "ub_rows":           (1, 1 << 20,  "rows of the unified buffer"),
    "weight_fifo_tiles": (1, 64,       "weight tiles the weight FIFO holds"),
    "weight_mem_tiles":  (1, 1 << 20,  "weight tiles the weight memory holds"),
    "weight_mem_latency": (0, 1024,    "cycles from a weight-memory read request to its data"),
    "weight_mem_bytes_per_cycle": (1, 1 << 16, "weight-memory bandwidth in bytes per cycle"),
    "pool_max_width":    (1, 65535,    "widest image line (in_w) windowed pooling supports: "
                                       "the pooling line buffer's length"),
}


@dataclass(frozen=True, kw_only=True)
class TPUConfig:
    """Sizes of one chip.

    Attributes
    ----------
    rows, cols : int
        Shape of the systolic array. A weight tile is ``rows x cols`` int8 values;
        a unified-buffer row holds ``rows`` activations.
    acc_rows : int
        Rows of the accumulator memory, each ``cols`` int32 values.
    ub_rows : int
        Rows of the unified buffer, each ``rows`` bytes.
    weight_fifo_tiles : int
        Depth of the weight FIFO, in whole tiles.
    weight_mem_tiles : int
        Capacity of the weight memory, in whole tiles.
    weight_mem_latency : int
        Cycles between a weight-memory read request and its first data.
    weight_mem_bytes_per_cycle : int
        Weight-memory bandwidth.
    pool_max_width : int
        Widest image line (ACT's ``in_w``) that windowed pooling (MAX, AVG)
        supports: the length of the pooling line buffer, in pixels. A wider
        ACT is the fault ILLEGAL_FIELD.

    Raises
    ------
    TypeError
        A field is not an ``int``.
    ConfigError
        A field is outside its range; the message names the field and the range.
    """

    rows: int = 8
    cols: int = 8
    acc_rows: int = 512
    ub_rows: int = 2048
    weight_fifo_tiles: int = 4
    weight_mem_tiles: int = 1024
    weight_mem_latency: int = 8
    weight_mem_bytes_per_cycle: int = 8
    pool_max_width: int = 64

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"TPUConfig.{f.name} must be an int, not {value!r}")
            low, high, meaning = _RANGES[f.name]
            if not low <= value <= high:
                raise ConfigError(f"TPUConfig.{f.name} = {value} is out of range: "
                                  f"{meaning} must be in {low}..{high}")

    @classmethod
    def field_names(cls):
        return [f.name for f in fields(cls)]

    @classmethod
    def describe(cls, name):
        """The allowed range and meaning of field `name`, as text."""
        low, high, meaning = _RANGES[name]
        return f"{meaning} ({low}..{high})"

    def replace(self, **changes):
        """A copy with `changes` applied (and validated)."""
        return TPUConfig(**{**asdict(self), **changes})

    def to_dict(self):
        return asdict(self)

    @property
    def name(self):
        """A short identifier, used for build directories and test ids."""
        return f"{self.rows}x{self.cols}"

    @property
    def acc_addr_width(self):
        return max(1, (self.acc_rows - 1).bit_length())

    @property
    def ub_addr_width(self):
        return max(1, (self.ub_rows - 1).bit_length())

    @property
    def tile_bytes(self):
        return self.rows * self.cols

    @property
    def peak_macs_per_cycle(self):
        return self.rows * self.cols
