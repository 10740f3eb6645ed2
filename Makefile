# gum: the two commands are `make reproduce` (the study) and `make test` (the tests).
# Each sets up the virtual environment it needs.

PROFILE ?= cpu
# The paper profile reads datasets by name; DATA=embedded runs it on the shipped data, offline.
DATA ?=
GRID_ARGS = --profile $(PROFILE) --jobs $(JOBS) $(if $(DATA),--data $(DATA))
JOBS ?= 2
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.test-installed
HTML := book/_build/html/index.html

.PHONY: reproduce test grid guide analysis book check-book browser bench gpu-check paper-smoke lab clean

# pip's and the build backend's chatter goes to a log, shown only if the install fails.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the package and its pinned dependencies into $(VENV) (log: $(VENV)/install.log)"
	@($(PY) -m pip install --quiet --upgrade pip && \
	  $(PY) -m pip install --quiet -c constraints.txt -e ".[book]") > $(VENV)/install.log 2>&1 || \
	  (cat $(VENV)/install.log; exit 1)
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

# The tests' extras (pytest, statsmodels, the paper profile's datasets) on top: `make reproduce` needs none of them.
$(TEST_STAMP): $(STAMP)
	@echo "installing the test extras into $(VENV) (log: $(VENV)/install.log)"
	@$(PY) -m pip install --quiet -c constraints.txt -e ".[test]" >> $(VENV)/install.log 2>&1 || \
	  (cat $(VENV)/install.log; exit 1)
	touch $@

# The decision guide's paper-size plans (the first time about 4 minutes of 2 cores, then cached): not for smoke.
GUIDE ?= $(if $(filter smoke,$(PROFILE)),,guide)

reproduce: $(STAMP)
	$(PY) -m gum_utils.study.grid $(GRID_ARGS)
	$(if $(GUIDE),$(MAKE) --no-print-directory guide)
	$(MAKE) --no-print-directory book PROFILE=$(PROFILE)
	@echo "The book: $(abspath $(HTML))"

grid: $(STAMP)
	$(PY) -m gum_utils.study.grid $(GRID_ARGS)

guide: $(STAMP)
	$(PY) -m gum_utils.study.guide --workers $(JOBS)

book: $(STAMP)
	$(PY) -m gum_utils.report.book --profile $(PROFILE)
	@echo "The book: $(abspath $(HTML))"

# Headless Chromium opens the built pages and checks that every figure loads.
check-book: $(STAMP) browser
	$(PY) -m gum_utils.report.browser_check book/_build/html --screenshots book/_build/screenshots

browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null)

# The suite in TEST_WORKERS processes (pytest-xdist): its end-to-end tests wait on kernels and
# subprocesses part of the time. Each worker trains in one thread (tests/conftest.py): two workers of
# two threads each on two cores spin-waited on each other (on 2 cores: 674 -> 570 s of pytest).
TEST_WORKERS ?= 2
test: $(TEST_STAMP) browser
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

bench: $(STAMP)
	$(PY) benchmarks/step_overhead.py
	$(PY) benchmarks/dask_overhead.py
	$(PY) benchmarks/plan_overhead.py
	$(PY) benchmarks/grid_time.py

# On a GPU machine's own Python (torch, transformers, numpy suffice): no virtual env, no CPU torch.
gpu-check:
	PYTHONPATH=. $(PYTHON) -m gum_utils.study.gpu_check --out gpu-check.json

# One SGD step of each architecture at paper size, batch 1, on the CPU (what fits in memory).
paper-smoke: $(STAMP)
	$(PY) -m gum_utils.study.gpu_check --device cpu --optimizers sgd --strategies standard --steps 1 --batch-size 1

# Rerun one notebook by hand: JupyterLab in the study's .venv (kernel "python3", the package), opened on notebooks/.
LAB_STAMP := $(VENV)/.lab-installed
$(LAB_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt jupyterlab > $(VENV)/lab-install.log 2>&1 || \
	  (cat $(VENV)/lab-install.log; exit 1)
	touch $@

lab: $(LAB_STAMP)
	$(PY) -m jupyter lab --notebook-dir=notebooks

clean:
	rm -rf book/_build book/runs book/report results
