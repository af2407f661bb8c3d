PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install browser demo test test-slow test-models test-torch-xla opinfo-full coverage bench clean

# torch goes in first and alone: pip then takes the local CPU wheel, and nothing later can pull a CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Optional: Debian's Chromium for the HTML report's browser tests (tests/report/test_html_browser.py), which skip
# and say why where it is missing. Needs root and apt; anywhere else it says so and the rest still runs.
browser:
	@command -v chromium >/dev/null 2>&1 && echo "chromium: $$(command -v chromium)" || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    (apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)) ; } || \
	  echo "chromium not installed (needs root and apt-get): the browser tests will skip"

demo: $(STAMP)
	$(PY) examples/demo.py

# Two workers, each taking whole test files (their module fixtures run once) in the order tests/conftest.py
# gives, longest first: CI has 2 cores, and most tests wait on a child process or a single-threaded compile.
# TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# Real torch_xla 2.9 (a CUDA build of torch 2.9, several GB; it runs on the CPU with PJRT_DEVICE=CPU) in its own
# virtualenv, for the adapter's live tests (tests/attach/test_real_torch_xla_attach.py): `xladev attach` on real
# runs of the common mistakes, then the report and the TUI on their logs. `make test` reads recorded logs instead.
# An existing one: make test-torch-xla TORCH_XLA_VENV=~/txla
TORCH_XLA_VENV ?= .venv-torch-xla

$(TORCH_XLA_VENV)/.xladev-installed:
	test -x $(TORCH_XLA_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_XLA_VENV)
	$(TORCH_XLA_VENV)/bin/python -m pip install -q torch==2.9.0 torch_xla==2.9.0
	touch $@

test-torch-xla: $(STAMP) $(TORCH_XLA_VENV)/.xladev-installed
	XLADEV_TORCH_XLA_PYTHON=$(abspath $(TORCH_XLA_VENV))/bin/python $(PY) -m pytest -q -m torch_xla tests/attach

test-models: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow" tests/models

opinfo-full: $(STAMP)
	XLADEV_OPINFO_FULL=1 $(PY) -m pytest -q -m slow tests/runtime/test_opinfo.py

coverage: $(STAMP)
	$(PY) -m xladev.cli.main coverage

bench: $(STAMP)
	$(PY) tools/bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
