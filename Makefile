# Two commands do all the set-up on a fresh clone:
#   make demo   train, quantize and compile two small networks and run them on the RTL
#   make test   run the whole test suite (RTL under Icarus and Verilator)
# Both create .venv and install the project into it when needed.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Test processes: one per core by default.
JOBS   ?= auto
STAMP   = $(VENV)/.installed

.PHONY: demo test verilog bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,fpga]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tpu demo

test: $(STAMP)
	PYTHONWARNINGS=error $(BIN)/python -m pytest -n $(JOBS) --durations=20 $(PYTEST_ARGS)

# The default chip's Verilog (module tpu_chip) and its port map.
verilog: $(STAMP)
	$(BIN)/tpu verilog -o build/tpu_chip.v

clean:
	rm -rf build
