"""The model compiler: quantized models in, chip programs out.

Front ends (one module each) read a model file into the intermediate
representation of `tpu.compiler.ir`; the back end tiles, allocates and
schedules it into a compiled model that the runtime runs on any
`tpu.driver` backend.
"""
