VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench install server worker api stop clean

demo:
	@scripts/demo.sh

test: $(STAMP)
	$(PY) -m pytest -q -n 2

bench: $(STAMP)
	@$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) -m bench

install: $(STAMP)

$(STAMP): pyproject.toml
	@echo "Installing into $(VENV) ..."
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
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
