"""The FPGA family a design is elaborated for, so that a block can use that
family's primitives by direct instantiation (the iCE40's SB_MAC16 in its dual
8 x 8 mode, its SB_SPRAM256KA, the ECP5's MULT18X18D) where synthesis would
not infer them, or keep a multiply out of the DSP blocks the array needs.

A board build elaborates under the board's Amaranth platform; Verilog
generation (`tpu.hdl.verilog.generate_verilog`) under a `ModuleLibrary`,
which carries the family it was asked for (none by default, so the
default Verilog names no vendor primitive).
"""

__all__ = ["ICE40", "ECP5", "family_of", "is_ice40", "is_ecp5"]

#: The family name of Lattice iCE40 devices (Amaranth's SiliconBluePlatform).
ICE40 = "ice40"

#: The family name of Lattice ECP5 devices (the ``family`` of Amaranth's
#: LatticePlatform for them).
ECP5 = "ecp5"


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


def is_ecp5(platform):
    """Whether `platform` builds for an ECP5."""
    return family_of(platform) == ECP5
