# Two commands do all the set-up: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run demo test lint browser bench bench-server bench-mem0 clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/ledgermem serve

demo: $(STAMP)
	$(PY) -m ledgermem.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check ledgermem tests bench examples
	$(VENV)/bin/mypy

# The dashboard's tests drive Debian's chromium (Playwright cannot fetch its own browsers
# here); apt-get runs only when it is missing.
browser:
	@test -x /usr/bin/chromium || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }

test: lint browser
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	$(PY) -m bench

bench-server: $(STAMP)
	$(PY) -m bench.server_load

# mem0 OSS beside ledgermem on LoCoMo; builds .bench/mem0-venv on its first run.
bench-mem0: $(STAMP)
	$(PY) -m bench.mem0_side

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
