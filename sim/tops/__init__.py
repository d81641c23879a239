"""Small RTL wrappers that put one unit behind the streams a testbench drives."""
