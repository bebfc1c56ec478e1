VENV ?= .venv
comma := ,
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-long test-real-model local-model bench docs install system-deps server worker api stop clean

demo:
	@scripts/demo.sh

# Bytecode is written whatever the environment says: the workflow sandbox imports the workflow's
# modules for every conversation it starts, and compiled them from source each time without it.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q

# Everything (tests/README.md says what each folder holds), in three processes: the suite waits
# on servers a third of its time; in four, the tests that kill workers lost heartbeats to the
# load on two cores.
test: $(STAMP) system-deps
	$(PYTEST) -n 3

# The pure rules, the conversation on an in-process worker, and the recorded histories' replay,
# in three processes (four were no faster).
test-fast: $(STAMP)
	$(PYTEST) -n 3 tests/rules tests/workflows tests/replay

# Also the stress-scale runs (the chaos run, 300 turns, more generated conversations).
test-long: $(STAMP) system-deps
	AGENT_TEST_LONG=1 $(PYTEST) -n 3

# The demo's prompts against a real model (never in CI): any OpenAI-compatible endpoint, or the
# small one `make local-model` serves on this CPU.
test-real-model: $(STAMP)
	@test -n "$$REAL_MODEL_BASE_URL" || { echo "Set REAL_MODEL_BASE_URL (and REAL_MODEL) to an OpenAI-compatible endpoint, or run 'make local-model' first and export what it prints."; exit 2; }
	$(PY) -m pytest -q -s tests/real_model

local-model:
	@python3 scripts/local_model.py up

bench: $(STAMP)
	@$(call install,dev$(comma)bench)
	$(PY) -m bench

# The docs site, strictly (a broken link or a page left out of the nav fails), into .site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d .site

install: $(STAMP)

# Debian's chromium and PostgreSQL, which the tests drive, where they are missing (apt-get).
system-deps:
	@scripts/system_deps.sh

# Installs with uv, which does what pip does in a fifth of the time (11 s here from a clean clone
# against 55); with pip if uv cannot be had: `$(call install,EXTRAS)`.
install = $(PY) -m pip install -q uv && $(VENV)/bin/uv pip install -q --python $(PY) -e '.[$(1)]' \
	|| $(PY) -m pip install -q -e '.[$(1)]'

$(STAMP): pyproject.toml
	@echo "Installing into $(VENV) ..."
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(call install,dev$(comma)docs)
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
