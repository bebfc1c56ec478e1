VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-long test-real-model local-model bench docs install server worker api stop clean

demo:
	@scripts/demo.sh

test: $(STAMP)
	$(PY) -m pytest -q -n 2

# Also the stress-scale runs (the chaos run, 300 turns, more generated conversations): ~10 min.
test-long: $(STAMP)
	AGENT_TEST_LONG=1 $(PY) -m pytest -q -n 2

# The demo's prompts against a real model (never in CI): any OpenAI-compatible endpoint, or the
# small one `make local-model` serves on this CPU.
test-real-model: $(STAMP)
	@test -n "$$REAL_MODEL_BASE_URL" || { echo "Set REAL_MODEL_BASE_URL (and REAL_MODEL) to an OpenAI-compatible endpoint, or run 'make local-model' first and export what it prints."; exit 2; }
	$(PY) -m pytest -q -s tests/real_model

local-model:
	@python3 scripts/local_model.py up

bench: $(STAMP)
	@$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) -m bench

# The docs site, strictly (a broken link or a page left out of the nav fails), into .site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d .site

install: $(STAMP)

$(STAMP): pyproject.toml
	@echo "Installing into $(VENV) ..."
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev,docs]'
	@touch $(STAMP)

server: $(STAMP)
	@scripts/stack.sh server

worker: $(STAMP)
	@scripts/stack.sh worker

api: $(STAMP)
	@scripts/stack.sh api

stop:
	@scripts/stack.sh stop

clean: stop
	rm -rf .run .temporal $(VENV)
