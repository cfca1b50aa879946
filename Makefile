# Two entry points a fresh Linux machine needs: `make demo` and `make test`.
# Everything installs into .venv; nothing here needs apt-get or root.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,mcp,openai-agents,langchain,ray]'
	touch $(VENV)/.installed $@

demo: $(VENV)/.installed
	@$(BIN)/python examples/demo.py

# The second pass runs the core attack suites again with a distribution bwrap
# forced by config (tests/isolation/system_bwrap.py says which it found).
ISOLATION_CORE := tests/isolation/test_iso_fs.py tests/isolation/test_iso_secrets.py \
	tests/isolation/test_iso_proc.py tests/isolation/test_iso_trust.py tests/isolation/test_iso_git.py

test: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/mypy --platform win32 src/stockade/drivers/windows
	$(BIN)/python -m pytest
	STOCKADE_TEST_BWRAP="$$($(BIN)/python tests/isolation/system_bwrap.py)" \
		$(BIN)/python -m pytest -q $(ISOLATION_CORE)

bench: $(VENV)/.installed
	$(BIN)/python bench/exec_overhead.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
