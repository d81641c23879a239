# Two commands do all the set-up on a fresh clone:
#   make demo   generate the default chip, summarise it, run an MLP on its golden model
#   make test   run the whole test suite (RTL under Icarus and Verilator)
# Both create .venv and install the project into it when needed.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
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
	PYTHONWARNINGS=error $(BIN)/python -m pytest

# The default chip's Verilog (module tpu_chip) and its port map.
verilog: $(STAMP)
	$(BIN)/tpu verilog -o build/tpu_chip.v

clean:
	rm -rf build
