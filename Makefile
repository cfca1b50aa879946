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
	$(BIN)/python -m pip install -q -e '.[dev,mcp,openai-agents,langchain,deepagents,inspect,mini-swe-agent,web,ray]'
	touch $(VENV)/.installed $@

# Claude Code itself, for tests/frontends/test_claude_code_itself.py. Without npm,
# or without the registry, that test is skipped and says why; nothing else needs it.
CLAUDE_CODE := 2.1.332
$(VENV)/claude-code/.installed-$(CLAUDE_CODE): | $(BIN)/python
	@if ! command -v npm >/dev/null; then \
	  echo "make: npm not found: the Claude Code test will be skipped"; \
	elif npm install --silent --no-audit --no-fund --prefix $(VENV)/claude-code \
	    @anthropic-ai/claude-code@$(CLAUDE_CODE); then touch $@; \
	else echo "make: npm could not install Claude Code: its test will be skipped"; fi

demo: $(VENV)/.installed
	@$(BIN)/python examples/demo.py

# The second pass runs the core attack suites again with a distribution bwrap
# forced by config (tests/isolation/system_bwrap.py says which it found), cold
# and as the unprivileged user only: a parked sandbox is the same bwrap command
# line with one more descriptor, and root is the runner that needs the least
# of bwrap's own checks; both ran, with stockade's bwrap, in the first pass.
# With them the whole run took longer than its 40 minutes.
ISOLATION_CORE := tests/isolation/test_iso_fs.py tests/isolation/test_iso_secrets.py \
	tests/isolation/test_iso_proc.py tests/isolation/test_iso_trust.py tests/isolation/test_iso_git.py

# Every step runs whatever the ones before it did, and the end lists each as
# passed, FAILED or SKIPPED (with why); the status fails if any did not pass.
# A recipe that stopped at the first failure never ran the second pass, and
# its log did not say so: a boundary broken only with the distribution's bwrap
# stayed hidden behind any failure of the first. The second pass gets a bwrap
# directory of its own run, so two runs at once do not replace each other's.
test: $(VENV)/.dev-installed $(VENV)/claude-code/.installed-$(CLAUDE_CODE)
	@report=""; bad=0; \
	step() { label="$$1"; shift; printf '\n== %s\n$$ %s\n' "$$label" "$$*"; "$$@"; rc=$$?; \
	  if [ $$rc -eq 0 ]; then report="$$report  passed   $$label\n"; \
	  else report="$$report  FAILED   $$label (exit $$rc)\n"; bad=1; fi; }; \
	step "ruff" $(BIN)/ruff check src tests bench; \
	step "mypy" $(BIN)/mypy; \
	step "mypy, Windows driver" $(BIN)/mypy --platform win32 src/stockade/drivers/windows; \
	step "mypy, macOS driver" $(BIN)/mypy --platform darwin src/stockade/drivers/macos; \
	step "first pass: the whole suite, stockade's own bwrap" $(BIN)/python -m pytest --durations=25; \
	dir=$$(mktemp -d /tmp/stockade-system-bwrap.XXXXXX) && \
	bwrap=$$($(BIN)/python tests/isolation/system_bwrap.py "$$dir"); rc=$$?; \
	if [ $$rc -eq 0 ] && [ -n "$$bwrap" ]; then \
	  step "second pass: core attack suites as the user, $$bwrap" \
	    env STOCKADE_TEST_BWRAP="$$bwrap" STOCKADE_TEST_RUNNERS=user \
	    $(BIN)/python -m pytest -q -k "not warm" \
	    $(ISOLATION_CORE); \
	else \
	  report="$$report  SKIPPED  second pass: no distribution bwrap could be prepared" ; \
	  report="$$report (tests/isolation/system_bwrap.py exit $$rc, see above)\n"; bad=1; \
	fi; \
	[ -n "$$dir" ] && rm -rf "$$dir"; \
	printf '\n== make test\n%b' "$$report"; \
	if [ $$bad -eq 0 ]; then echo "make test: every step passed"; \
	else echo "make test: FAILED (see the steps above)"; fi; \
	exit $$bad

bench: $(VENV)/.installed
	$(BIN)/python bench/exec_overhead.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
