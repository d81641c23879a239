"""The FPGA family a design is elaborated for, so that a block can use that
family's primitives by direct instantiation (the iCE40's SB_MAC16 in its dual
8 x 8 mode, its SB_SPRAM256KA) where synthesis would not infer them.

A board build elaborates under the board's Amaranth platform; Verilog
generation (`tpu.hdl.verilog.generate_verilog`) under a `ModuleLibrary`,
which carries the family it was asked for (none by default, so the
default Verilog names no vendor primitive).
"""

__all__ = ["ICE40", "family_of", "is_ice40"]

#: The family name of Lattice iCE40 devices (Amaranth's SiliconBluePlatform).
ICE40 = "ice40"


def family_of(platform):
    """``"ice40"`` for an iCE40 platform or a platform whose ``family`` says
    so; otherwise the platform's ``family`` attribute or None."""
    from amaranth.vendor import SiliconBluePlatform
    if isinstance(platform, SiliconBluePlatform):
        return ICE40
    return getattr(platform, "family", None)


def is_ice40(platform):
    """Whether `platform` builds for an iCE40."""
    return family_of(platform) == ICE40
