"""Hand-instantiated SB_MAC16s kept as they are through ``synth_ice40 -dsp``.

Yosys 0.70's ``ice40_dsp`` pass, which ``synth_ice40 -dsp`` runs, takes
every SB_MAC16 of the design, not only those it makes from multiplies, and
rebuilds its configuration as a 16 x 16 multiplier: an SB_MAC16 in its dual
8 x 8 mode (`tpu.hdl.multiplier.ICE40DualMultiplier`) would come out as
another circuit. :data:`BEFORE_SYNTH` gives the instantiated ones a private
cell type, a copy of the SB_MAC16 black box that the pass does not know;
:data:`AFTER_SYNTH` gives them their type back.
"""

__all__ = ["BEFORE_SYNTH", "AFTER_SYNTH"]

#: Yosys commands between reading the design and ``synth_ice40``.
BEFORE_SYNTH = ("read_verilog -lib +/ice40/cells_sim.v", "rename SB_MAC16 TPU_SB_MAC16",
                "chtype -map SB_MAC16 TPU_SB_MAC16")

#: Yosys commands right after ``synth_ice40``.
AFTER_SYNTH = ("chtype -map TPU_SB_MAC16 SB_MAC16", "delete TPU_SB_MAC16")
