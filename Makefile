# Two commands do all the set-up on a fresh clone:
#   make demo   train, quantize and compile two small networks and run them on the RTL
#   make test   run the test suite as CI does (RTL under Icarus and Verilator)
#   make test-long   every case of every RTL test under both simulators (hours)
# Both create .venv and install the project into it when needed.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Test processes: one per core by default.
JOBS   ?= auto
STAMP   = $(VENV)/.installed

.PHONY: demo test test-long regress mutants verilog bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,fpga,serve]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tpu demo

test: $(STAMP)
	PYTHONWARNINGS=error $(BIN)/python -m pytest -n $(JOBS) --durations=20 $(PYTEST_ARGS)

# The cases CI leaves out (docs/testing.md, "The long run") as well.
test-long: $(STAMP)
	TPU_LONG=1 PYTHONWARNINGS=error $(BIN)/python -m pytest -n $(JOBS) --durations=20 $(PYTEST_ARGS)

# Random regressions: SEEDS programs per configuration (CONFIGS, comma-separated
# names from tpu.sim.regress.CONFIGS) on the core against the golden model, and
# the DMA reader's error cases, sharded over the cores; writes
# $(REGRESS_DIR)/summary.md with failures, replay commands and coverage.
SEEDS       ?= 1000
CONFIGS     ?= 4x4,8x8,16x16
REGRESS_DIR ?= build/regress
REGRESS_SIM ?= verilator
# Programs per simulation: a simulator start costs as much CPU as about 30
# programs (docs/regress.md), so batches are long; a failure ends its batch.
BATCH       ?= 100
regress: $(STAMP)
	rm -rf $(REGRESS_DIR)
	-TPU_REGRESS_PROGRAMS=$(SEEDS) TPU_REGRESS_CONFIGS=$(CONFIGS) TPU_REGRESS_DIR=$(REGRESS_DIR) \
	  TPU_REGRESS_SIM=$(REGRESS_SIM) TPU_REGRESS_BATCH=$(BATCH) PYTHONWARNINGS=error \
	  $(BIN)/python -m pytest -n $(JOBS) -q tests/test_regress.py -k 'core_batch or dma_batch' $(PYTEST_ARGS)
	$(BIN)/python -m tpu.sim.regress $(REGRESS_DIR)

# Mutation testing: apply each mutant of scripts/mutants.toml, run its tests;
# with SAMPLE=N, N mutants drawn (seed SEED) from the generated ones of hdl/,
# WORKERS of them at once (each more in a copy of the tree with its own .venv).
SEED ?= 1
WORKERS ?= 1
mutants: $(STAMP)
	$(BIN)/python scripts/mutants.py $(if $(SAMPLE),--sample $(SAMPLE) --draw-seed $(SEED) --workers $(WORKERS)) $(MUTANTS_ARGS)

# The default chip's Verilog (module tpu_chip) and its port map.
verilog: $(STAMP)
	$(BIN)/tpu verilog -o build/tpu_chip.v

clean:
	rm -rf build
