# LoaderLab: `make run` serves the dashboard (queuing a demo sweep the first time); `make test` runs the whole suite.
# Both create .venv if missing and install the pinned requirements first. On a GPU box with its own torch:
# `make test-gpu` and `make bench-gpu` (below).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)
CLUSTER_STAMP := $(VENV)/.cluster-$(shell cat requirements.txt requirements-cluster.txt | cksum | cut -d' ' -f1)
DEV_STAMP := $(VENV)/.dev-$(shell cat requirements.txt requirements-dev.txt | cksum | cut -d' ' -f1)
PORT ?= 8501
ADDRESS ?= 127.0.0.1
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (0: one process). Two on a 2-core machine left the cores idle a quarter of
# the parallel part (tests wait on tune budgets, timeouts, start-ups); three took it from 21 to 16-17 min. Under
# three, two timing properties failed at first (ci12 at 138a403: tune's probe, then a cold Python, past its share;
# a script tune's budget too short for its candidates): the probe now forks warm and the budget has room (ci13 at
# d9369cb passed). Four filled the cores (ci25 at 8cad64c: 0 % idle) but spent more CPU (27.8 min against 25.3) and
# took longer (16.0 min against 15.0 for the parallel part): the tests whose budgets are wall time take what CPU they
# can get. tests/conftest.py gives each worker its share of the cores and runs the longest modules first.
# docs/development.md says how long the suite takes, and where.
TEST_WORKERS ?= 3
# Whole modules to a worker, in tests/conftest.py's order (the longest first, from tests/module_seconds.json): handed
# out test by test, each worker made every module's fixtures again (warm parents, dashboard servers with their
# Chromium, a local Ray), a CPU cost on machines whose parallel part keeps every core busy.
XDIST_ARGS := --dist loadscope --no-loadscope-reorder
# Python caches what it compiles (__pycache__/, as it does by default): an environment that says not to
# (PYTHONDONTWRITEBYTECODE, set on the CI machine) made every process the suite starts compile the engine again, and
# every pytest process rewrite the test files' asserts again (8 CPU-seconds of each collection, 4.6 cached). pip
# installs with --no-compile for the same reason: it compiled all of torch (33 of the install's 73 s on 2 cores),
# where the first import compiles only what is imported, once.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check --no-compile

.PHONY: install run demo worker lint test browser-deps media-deps share clean bench test-gpu bench-gpu docs docs-serve

$(STAMP): requirements.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP_INSTALL) -r requirements.txt
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP)

# Ray (optional for users; the suite exercises the Ray executor on a local instance, so tests need it)
$(CLUSTER_STAMP): $(STAMP) requirements-cluster.txt
	$(PIP_INSTALL) -r requirements-cluster.txt
	@rm -f $(VENV)/.cluster-*; touch $(CLUSTER_STAMP)

# The linter and the type checker (pinned in requirements-dev.txt; settings in pyproject.toml)
$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(PIP_INSTALL) -r requirements-dev.txt
	@rm -f $(VENV)/.dev-*; touch $(DEV_STAMP)

# ruff's lint and format check over the whole tree, and mypy over engine/
lint: $(DEV_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# The first time (an empty store), queue the demo sweep as jobs; the worker runs it (about 1.5 min on 2 cores)
# while the dashboard already serves, and the Launch page shows it live.
demo: install
	$(PY) -m engine demo

# Serves on 127.0.0.1 only; see `make share` for the LAN. .streamlit/config.toml hides the Deploy button.
# `engine serve` runs `streamlit run app.py` and the job worker: Ctrl-C stops both, except a worker that was
# already running before (then it says so, and `python -m engine worker --stop` stops it).
run: demo
	$(PY) -m engine serve --address $(ADDRESS) --port $(PORT)

# The browser tests drive Debian's chromium with Playwright (no browser download).
browser-deps:
	@command -v chromium >/dev/null || { \
		echo "installing Debian's chromium for the browser tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@command -v chromium >/dev/null || { echo "chromium is missing and could not be installed"; exit 1; }

# spdl_io (the spdl loader's own decoders) loads FFmpeg's shared libraries; Debian 12 names them below. Without them
# the spdl loader decodes with PIL, and the test of its decoders fails under `make test` rather than skip.
MEDIA_PKGS := libavfilter8 libavformat59 libavcodec59 libavdevice59 libswscale6 libswresample4
media-deps:
	@ldconfig -p | grep -q 'libavfilter.so' || { \
		echo "installing FFmpeg's libraries for spdl_io's decoders: $(MEDIA_PKGS)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(MEDIA_PKGS) >/dev/null; }
	@ldconfig -p | grep -q 'libavfilter.so' || { echo "FFmpeg's libraries are missing and could not be installed"; exit 1; }

# The tests marked quiet (a bound no run beats, the probe's GIL share: each needs the cores to itself) and serial (the
# machine's own BLAS pools, which xdist's workers cap at one thread) run one at a time
# first, the rest on TEST_WORKERS; PYTEST_ARGS go to both (paths, -k, -x; not -m). Exit 5 is "none selected here".
PYTEST := LOADERLAB_REQUIRE_BROWSER=1 LOADERLAB_REQUIRE_RAY=1 LOADERLAB_REQUIRE_SPDL_IO=1 $(PY) -m pytest
# ruff runs first (a second); mypy (the lint part's half a minute of CPU, most of it reading torch's types) runs
# beside the parallel part, whose cores are idle a sixth of the time, and its output is printed after it. The quiet
# part runs alone. Each part runs whatever the ones before gave, so one CI run reports every failure; the target
# fails if any did, and its last line names the parts that failed. Each part's minutes are printed as it ends.
test: $(CLUSTER_STAMP) $(DEV_STAMP) browser-deps media-deps
	@failed=""; start=$$SECONDS; \
	{ $(PY) -m ruff check . && $(PY) -m ruff format --check .; } || failed="the lint part (ruff)"; \
	echo "make test: ruff took $$(( SECONDS - start )) s"; \
	start=$$SECONDS; \
	$(PYTEST) -m "quiet or serial" $(PYTEST_ARGS) || [ $$? -eq 5 ] || failed="$${failed:+$$failed and }the quiet/serial part (one at a time)"; \
	echo "make test: the quiet/serial part took $$(( (SECONDS - start) / 60 )) min $$(( (SECONDS - start) % 60 )) s"; \
	start=$$SECONDS; mypy_log=$$(mktemp); \
	{ $(PY) -m mypy > $$mypy_log 2>&1; echo $$? >> $$mypy_log.rc; } & mypy_pid=$$!; \
	$(PYTEST) -n $(TEST_WORKERS) $(XDIST_ARGS) -m "not quiet and not serial" $(PYTEST_ARGS) || [ $$? -eq 5 ] \
		|| failed="$${failed:+$$failed and }the parallel part (-n $(TEST_WORKERS))"; \
	echo "make test: the parallel part took $$(( (SECONDS - start) / 60 )) min $$(( (SECONDS - start) % 60 )) s"; \
	wait $$mypy_pid; echo "make test: mypy (run beside the parallel part):"; cat $$mypy_log; \
	[ "$$(cat $$mypy_log.rc)" = 0 ] || failed="$${failed:+$$failed and }the lint part (mypy)"; rm -f $$mypy_log $$mypy_log.rc; \
	if [ -n "$$failed" ]; then echo "make test FAILED in $$failed: its failures are listed above"; exit 1; fi

# The docs site (docs/, mkdocs.yml): built strictly, so a broken link or a missing page fails; the CLI reference is
# generated from the CLI's parsers as it builds. `make test` builds it too (tests/docs/test_docs.py).
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

bench: install
	$(PY) bench/loaders.py

# On a GPU box that has its own CUDA torch: that Python (PYTHON=...), no venv; only the pinned packages it lacks
# are installed (pip --no-deps; PIP_ARGS='--no-index --find-links DIR' offline), never torch. Results and a
# summary to paste into an issue go to $(GPU_OUT)/summary.md (bench/gpu_box.py says what each step runs).
PYTHON ?= python3
GPU_OUT ?= data/gpu-box
PIP_ARGS ?=

test-gpu:
	$(PYTHON) bench/gpu_box.py install --out $(GPU_OUT) --pip-args="$(PIP_ARGS)"
	$(PYTHON) bench/gpu_box.py test --out $(GPU_OUT)

bench-gpu:
	$(PYTHON) bench/gpu_box.py install --out $(GPU_OUT) --pip-args="$(PIP_ARGS)"
	$(PYTHON) bench/gpu_box.py bench --out $(GPU_OUT)

# Serve on the LAN. Every page and share link then needs the access token: $LOADERLAB_TOKEN if
# set, else a fresh one printed here. Open http://<this host>:$(PORT)/?token=<token> once per browser.
share: demo
	@TOKEN=$${LOADERLAB_TOKEN:-$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(18))')}; \
	echo "LoaderLab on the LAN: http://$$(hostname -I | cut -d' ' -f1):$(PORT)/?token=$$TOKEN"; \
	LOADERLAB_TOKEN=$$TOKEN $(PY) -m engine serve --address 0.0.0.0 --port $(PORT)

clean:
	rm -rf $(VENV) .pytest_cache site
