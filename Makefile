# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv at the repo root
# once (torch 2.13.0 first and explicitly: any other torch pulls GBs of CUDA packages), then reuse it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ENGINE ?= torch
DEMO_ARGS ?=

.PHONY: setup demo test lint clean-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,data]"
	touch $@

setup: $(STAMP)

demo: setup
	$(BIN)/python -m rllib_llm.demo --engine $(ENGINE) $(DEMO_ARGS)

test: setup
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check rllib_llm envs tests examples benchmarks

clean-venv:
	rm -rf $(VENV)
