import pytest

from tpu import TPUConfig, ConfigError


def test_defaults_are_an_8x8_chip():
    config = TPUConfig()
    assert (config.rows, config.cols) == (8, 8)
    assert config.weight_fifo_tiles == 4
    assert config.pool_max_width == 64
    assert config.tile_bytes == 64
    assert config.name == "8x8"


@pytest.mark.parametrize("name", TPUConfig.field_names())
@pytest.mark.parametrize("offset", ["below", "above"])
def test_out_of_range_names_the_field_and_range(name, offset):
    low, high = {
        "rows": (1, 256), "cols": (1, 256), "acc_rows": (1, 1 << 16), "ub_rows": (1, 1 << 20),
        "weight_fifo_tiles": (1, 64), "weight_mem_tiles": (1, 1 << 20),
        "weight_mem_latency": (0, 1024), "weight_mem_bytes_per_cycle": (1, 1 << 16),
        "pool_max_width": (1, 65535), "link_dw": (1, 8), "max_payload": (128, 4096),
        "max_read_request": (128, 4096), "read_tags": (1, 32), "cpl_timeout": (16, 1 << 24),
        "dma_windows": (1, 16), "requantizers": (0, 256), "requantizer_multiplier_width": (8, 32),
        "host_addr_bits": (32, 64), "counter_bits": (32, 64), "dsp_multipliers": (0, 65536),
        "dsp_bands": (0, 1), "pe_multiplier_latency": (2, 3), "serial_issue": (0, 1),
        "serial_decode": (0, 1), "serial_act": (0, 1), "serial_host": (0, 1), "narrow_host": (0, 1),
        "ram_counters": (0, 1), "mlas_rounding": (0, 1),
    }[name]
    value = low - 1 if offset == "below" else high + 1
    with pytest.raises(ConfigError, match=rf"TPUConfig\.{name} = {value} is out of range: .* must be in {low}\.\.{high}"):
        TPUConfig(**{name: value})


@pytest.mark.parametrize("value", [8.0, "8", True, None])
def test_non_int_is_a_type_error(value):
    with pytest.raises(TypeError, match="TPUConfig.rows must be an int"):
        TPUConfig(rows=value)


def test_frozen_and_replace_validates():
    config = TPUConfig(rows=4, cols=16)
    with pytest.raises(AttributeError):
        config.rows = 5
    assert config.replace(cols=2) == TPUConfig(rows=4, cols=2)
    with pytest.raises(ConfigError, match="cols"):
        config.replace(cols=300)


def test_extremes_are_allowed():
    TPUConfig(rows=1, cols=1, acc_rows=1, ub_rows=1, pool_max_width=1)
    assert TPUConfig(pool_max_width=65535).pool_max_width == 0xFFFF   # every in_w
    big = TPUConfig(rows=256, cols=256)
    assert big.acc_addr_width == 9
    assert TPUConfig(acc_rows=1).acc_addr_width == 1


def test_pool_max_width_is_described():
    assert TPUConfig.describe("pool_max_width") == (
        "widest image line (in_w) windowed pooling supports: the pooling line buffer's length "
        "(1..65535)")
    assert TPUConfig().replace(pool_max_width=300).pool_max_width == 300


@pytest.mark.parametrize("name, value", [("link_dw", 3), ("max_payload", 384), ("max_read_request", 1000)])
def test_link_sizes_are_powers_of_two(name, value):
    with pytest.raises(ConfigError, match=rf"TPUConfig\.{name} = {value} is not a power of two"):
        TPUConfig(**{name: value})


def test_requantizers_default_to_one_per_column():
    assert TPUConfig(cols=8).requantizer_lanes == 8
    assert TPUConfig(cols=8).act_row_cycles == 1
    shared = TPUConfig(cols=8, requantizers=3)
    assert (shared.requantizer_lanes, shared.requantize_steps, shared.act_row_cycles) == (3, 3, 3)
    assert TPUConfig(cols=8, requantizers=8).act_row_cycles == 1


def test_more_requantizers_than_columns_is_an_error():
    with pytest.raises(ConfigError, match=r"TPUConfig\.requantizers = 5 is more than cols = 4"):
        TPUConfig(rows=4, cols=4, requantizers=5)


def test_requantizer_multiplier_width_sets_the_act_row_time():
    assert TPUConfig(requantizer_multiplier_width=16).act_row_cycles == 4
    assert TPUConfig(cols=8, requantizers=3, requantizer_multiplier_width=8).act_row_cycles == 3 * 16
    with pytest.raises(ConfigError, match="requantizer_multiplier_width = 12 is not a power of two"):
        TPUConfig(requantizer_multiplier_width=12)


def test_up5k_profile_and_overrides():
    from tpu.config import PROFILES, UP5K_PROFILE
    assert TPUConfig.from_options({}, "up5k") == UP5K_PROFILE
    assert (UP5K_PROFILE.rows, UP5K_PROFILE.cols, UP5K_PROFILE.requantizers) == (2, 2, 1)
    # The small sequencer and decoder; every other chip has the parallel ones.
    assert (UP5K_PROFILE.serial_issue, UP5K_PROFILE.serial_decode) == (1, 1)
    assert (TPUConfig().serial_issue, TPUConfig().serial_decode) == (0, 0)
    assert TPUConfig.from_options({"rows": 4, "cols": 4}, "up5k").cols == 4
    assert set(PROFILES) == {"up5k", "ulx3s16", "v1"}
    with pytest.raises(ConfigError, match="unknown board profile 'up6k': the profiles are ulx3s16, up5k, v1"):
        TPUConfig.from_options({}, "up6k")


def test_v1_profile_is_tpu_v1():
    from tpu.config import V1_PROFILE
    assert TPUConfig.from_options({}, "v1") == V1_PROFILE
    assert (V1_PROFILE.rows, V1_PROFILE.cols) == (256, 256)
    # 24 MiB of unified buffer, 4 MiB of int32 accumulators, 34 GB/s at 700 MHz
    assert V1_PROFILE.ub_rows * V1_PROFILE.rows == 24 * 2**20
    assert V1_PROFILE.acc_rows * V1_PROFILE.cols * 4 == 4 * 2**20
    assert V1_PROFILE.weight_mem_bytes_per_cycle == 48


def test_ulx3s16_profile_is_a_16x16_chip_in_dsp_bands():
    from tpu.config import UP5K_HOST_FIELDS, ULX3S16_PROFILE
    assert TPUConfig.from_options({}, "ulx3s16") == ULX3S16_PROFILE
    assert (ULX3S16_PROFILE.rows, ULX3S16_PROFILE.cols, ULX3S16_PROFILE.requantizers) == (16, 16, 1)
    assert (ULX3S16_PROFILE.dsp_bands, ULX3S16_PROFILE.dsp_multipliers) == (1, 0)
    assert ULX3S16_PROFILE.pe_multiplier_latency == 3
    assert all(getattr(ULX3S16_PROFILE, name) == value for name, value in UP5K_HOST_FIELDS.items())
    assert TPUConfig().dsp_multipliers == 0


def test_dsp_bands_refuses_a_dsp_budget():
    assert TPUConfig(dsp_bands=1).dsp_bands == 1
    with pytest.raises(ConfigError, match=r"dsp_bands = 1 places the array's DSP blocks itself: "
                                          r"dsp_multipliers must be 0 with it, not 141"):
        TPUConfig.from_options({"dsp_multipliers": 141}, "ulx3s16")
    assert TPUConfig.from_options({"dsp_multipliers": 141, "dsp_bands": 0}, "ulx3s16").dsp_multipliers == 141


def test_host_widths_default_to_64_bits_and_up5k_fields_are_valid():
    from tpu.config import UP5K_HOST_FIELDS
    config = TPUConfig()
    assert (config.host_addr_bits, config.counter_bits) == (64, 64)
    small = TPUConfig(**UP5K_HOST_FIELDS)
    assert (small.host_addr_bits, small.counter_bits, small.link_dw, small.read_tags) == (32, 32, 1, 1)


def test_up5k_profile_has_the_uart_sized_host_interface():
    from tpu.config import UP5K_HOST_FIELDS, UP5K_PROFILE
    assert all(getattr(UP5K_PROFILE, name) == value for name, value in UP5K_HOST_FIELDS.items())
    assert (UP5K_PROFILE.host_addr_bits, UP5K_PROFILE.counter_bits) == (32, 32)


def test_serial_act_needs_a_multi_cycle_product():
    from tpu.config import UP5K_PROFILE
    assert UP5K_PROFILE.serial_act == 1 and TPUConfig().serial_act == 0
    with pytest.raises(ConfigError, match="serial_act = 1 needs requantizer_multiplier_width 16 or 8"):
        TPUConfig(serial_act=1)
    assert TPUConfig(serial_act=1, requantizer_multiplier_width=8).act_row_cycles == 16


def test_serial_host_needs_a_one_word_link_with_one_tag():
    from tpu.config import ULX3S16_PROFILE, UP5K_PROFILE
    assert UP5K_PROFILE.serial_host == 1 and ULX3S16_PROFILE.serial_host == TPUConfig().serial_host == 0
    for fields in (dict(link_dw=1), dict(read_tags=1), dict(link_dw=2, read_tags=1)):
        with pytest.raises(ConfigError, match="serial_host = 1 is the host side of a one-word link "
                                              "with one read tag"):
            TPUConfig(serial_host=1, **fields)
    TPUConfig(serial_host=1, link_dw=1, read_tags=1)


def test_pe_multiplier_latency():
    assert TPUConfig().pe_multiplier_latency == 2
    assert TPUConfig().matrix_latency == 8 + 8 + 2
    assert TPUConfig(rows=4, cols=5, pe_multiplier_latency=3).matrix_latency == 4 + 5 + 3
    for bad in (1, 4):
        with pytest.raises(ConfigError, match=rf"TPUConfig\.pe_multiplier_latency = {bad} is out of "
                                              r"range: cycles each PE's multiplier takes"):
            TPUConfig(pe_multiplier_latency=bad)
    assert "2..3" in TPUConfig.describe("pe_multiplier_latency")


def test_narrow_host_needs_the_serial_host():
    assert TPUConfig().narrow_host == 0
    with pytest.raises(ConfigError, match="narrow_host = 1 is a protocol of the host side's small "
                                          "form behind a UART: it needs serial_host 1"):
        TPUConfig(narrow_host=1)
    with pytest.raises(ConfigError, match="narrow_host = 1 .* needs serial_host 1"):
        TPUConfig(narrow_host=1, link_dw=1, read_tags=1)
    with pytest.raises(ConfigError, match="narrow_host = 1 carries 32-bit host addresses: it needs "
                                          "host_addr_bits 32, not 64"):
        TPUConfig(narrow_host=1, serial_host=1, link_dw=1, read_tags=1)
    assert TPUConfig(narrow_host=1, serial_host=1, link_dw=1, read_tags=1,
                     host_addr_bits=32).narrow_host == 1
    from tpu.config import ULX3S16_PROFILE, UP5K_PROFILE
    assert UP5K_PROFILE.narrow_host == 1 and ULX3S16_PROFILE.narrow_host == 0


def test_ram_counters_needs_the_serial_host():
    """The counters in a block RAM answer a register read a word at a time:
    the up5k profile keeps them so, in both its host forms."""
    from tpu.config import ULX3S16_PROFILE, UP5K_PROFILE
    assert TPUConfig().ram_counters == 0 and ULX3S16_PROFILE.ram_counters == 0
    assert UP5K_PROFILE.ram_counters == 1 and UP5K_PROFILE.replace(narrow_host=0).ram_counters == 1
    with pytest.raises(ConfigError, match="ram_counters = 1 reads a counter a word at a time, as the "
                                          "host side's small form does: it needs serial_host 1"):
        TPUConfig(ram_counters=1, link_dw=1, read_tags=1)
    assert TPUConfig(ram_counters=1, serial_host=1, link_dw=1, read_tags=1).ram_counters == 1


def test_mlas_rounding_on_the_chips_within_their_depth_budget():
    """The MLAS rounding is on by default and in the v1 and ulx3s16
    profiles (the ulx3s16 chip's shared lane within its depth budget with
    it since its float32(x) leaves its add to the product); the up5k
    profile (over its LUT budget with it) is built without it, and the
    option adds it back, or takes it from the others."""
    from tpu.config import ULX3S16_PROFILE, UP5K_PROFILE, V1_PROFILE
    assert TPUConfig().mlas_rounding == 1 and V1_PROFILE.mlas_rounding == 1
    assert ULX3S16_PROFILE.mlas_rounding == 1 and UP5K_PROFILE.mlas_rounding == 0
    assert TPUConfig.from_options({"mlas_rounding": 1}, "up5k").mlas_rounding == 1
    assert TPUConfig.from_options({"mlas_rounding": 0}, "ulx3s16").mlas_rounding == 0
