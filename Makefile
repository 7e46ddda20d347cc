# Two commands for a newcomer: `make release` and `make test`. Only Python 3.11 is assumed.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The synthetic benchmark's peers, in an environment of their own (`make synth-peers`).
SYNTH_PEERS := $(VENV)-synth-peers
# Exact versions with hashes (docs/operating.md: "Reproducible install"); pyproject.toml keeps ranges for library users.
LOCK := requirements/lock.txt
export DAGSTER_HOME := $(CURDIR)/.dagster_home

CHROMIUM := /usr/bin/chromium
# Debian's PostgreSQL server: the ledger tests run against a real one (opal_dp_tests/services.py).
POSTGRES := /usr/share/doc/postgresql/copyright
# Debian's Redis: the broker of the Celery workers in `make cluster-test` (deploy/README.md).
REDIS := /usr/bin/redis-server
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: release test check cluster-test ui ui-readonly daemon bench clean lock mutation synth-peers synth-peers-lock

$(STAMP): pyproject.toml $(LOCK)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# Re-resolve the lock after a dependency change in pyproject.toml (LOCK_ARGS=--upgrade: newest allowed versions).
# Extras stay on their lines (gql[requests]==...): pip 23 refuses an unpinned extra in --require-hashes mode.
lock:
	$(PYTHON) -m venv $(VENV)-lock
	$(VENV)-lock/bin/pip install --quiet pip-tools==7.6.2
	CUSTOM_COMPILE_COMMAND="make lock" $(VENV)-lock/bin/pip-compile --quiet --extra test --extra cluster --extra bench --all-build-deps \
	  --generate-hashes --allow-unsafe --no-strip-extras --no-emit-index-url --no-emit-find-links \
	  $(LOCK_ARGS) -o $(LOCK) pyproject.toml

$(DAGSTER_HOME): | $(STAMP)
	@$(PY) -m opal_dp.cli dagster-home $@ >/dev/null

# Default: one card protected over each calendar week at the weekly share of the person cap (docs/privacy.md, "The default
# release"); make release PRIVACY_UNIT=trip reproduces the 2016 trip-level release (no person-level bound).
# On the default ./data the bundled synthetic sample is generated when raw/ holds no real day file (--sample);
# with $OPAL_DP_DATA_DIR set, only the files there are released.
release: $(STAMP) | $(DAGSTER_HOME)
	$(PY) -m opal_dp.cli release $(if $(OPAL_DP_DATA_DIR),,--sample) $(if $(PRIVACY_UNIT),--privacy-unit $(PRIVACY_UNIT))

# The browser test drives Debian's Chromium (Playwright cannot download browsers here).
$(CHROMIUM):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq chromium

$(POSTGRES):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql

$(REDIS):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server

# One worker per core; a test file's tests share a worker (module fixtures run once). The 25 slowest tests are
# printed, so that the next one to grow shows. The suite is two tiers: `make check` (every test but the slow tier:
# end-to-end releases through Dagster, the command line, the daemon, Celery, a browser, the benchmark) before each
# commit, `make test` (everything; CI) before each push.
test: $(STAMP) $(SYNTH_PEERS)/.installed-stamp $(CHROMIUM) $(POSTGRES) $(REDIS)
	$(PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=25

check: $(STAMP) $(POSTGRES)
	$(PY) -m pytest -n auto --dist loadfile --durations=10 -m "not slow"

# The deploy/ profile on localhost: PostgreSQL, Redis and 2 Celery workers release the sample (also in `make test`).
cluster-test: $(STAMP) $(POSTGRES) $(REDIS)
	$(PY) -m pytest -p no:cacheprovider opal_dp_tests/test_cluster.py

# The UI shows internal, non-DP figures: it binds to this machine only (UI_HOST=0.0.0.0 exposes it), on UI_PORT.
UI_HOST ?= 127.0.0.1
UI_PORT ?= 3000
# umask 077: what Dagster writes into its home (event log, compute logs) stays private. `dg dev` serves the project
# of pyproject.toml ([tool.dg]: the code location opal_dp, as workspace.yaml). opal_dp.supervise runs it in its own
# session and passes SIGTERM or Ctrl-C on as one SIGINT to `dg dev` alone: a signal to every process at once lets `dg
# dev` restart its code server while it shuts down, and that code server then lingers 45 s (the module says more).
# `exec`: make's own SIGTERM, which make passes on to its recipe, reaches the supervisor, not a shell.
ui: $(STAMP) | $(DAGSTER_HOME)
	umask 077 && VIRTUAL_ENV="$(CURDIR)/$(VENV)" PATH="$(CURDIR)/$(VENV)/bin:$$PATH" exec $(PY) -m opal_dp.supervise dg dev --host $(UI_HOST) --port $(UI_PORT)

# For people who look but must not launch or wipe anything (it still shows the internal figures: see docs/operating.md).
ui-readonly: $(STAMP) | $(DAGSTER_HOME)
	umask 077 && $(VENV)/bin/dagster-webserver -w workspace.yaml -h $(UI_HOST) -p $(UI_PORT) --read-only

# The weekly operation without the UI: the daemon alone runs sensors, automation, backfills and queued runs
# (docs/operating.md "Weekly operation"; deploy/opal-dp-daemon.service runs the same as a service). Automation is on
# (OPAL_DP_AUTOMATION=0 leaves the sensors as the UI set them). Never beside `make ui`, which runs a daemon itself.
OPAL_DP_AUTOMATION ?= 1
daemon: $(STAMP) | $(DAGSTER_HOME)
	umask 077 && OPAL_DP_AUTOMATION=$(OPAL_DP_AUTOMATION) $(VENV)/bin/dagster-daemon run -w workspace.yaml

# The peer libraries the benchmark runs (the `bench` extra) are in the lock: installed, with hashes, by $(STAMP).
bench: $(STAMP)
	$(PY) -m benchmarks $(BENCH_ARGS)

# The synthetic benchmark's peers, MST and AIM (smartnoise-synth), in an environment of their own: smartnoise-synth
# needs opendp<0.15, the project opendp 0.16 (requirements/synth-peers.in says why two files).
synth-peers: $(SYNTH_PEERS)/.installed-stamp
$(SYNTH_PEERS)/.installed-stamp: requirements/synth-peers.txt requirements/synth-peers-nodeps.txt
	$(PYTHON) -m venv $(SYNTH_PEERS)
	$(SYNTH_PEERS)/bin/pip install --quiet --require-hashes -r requirements/synth-peers.txt
	$(SYNTH_PEERS)/bin/pip install --quiet --no-deps --require-hashes -r requirements/synth-peers-nodeps.txt
	@touch $@

synth-peers-lock:
	$(PYTHON) -m venv $(VENV)-lock
	$(VENV)-lock/bin/pip install --quiet pip-tools==7.6.2
	CUSTOM_COMPILE_COMMAND="make synth-peers-lock" $(VENV)-lock/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
	  --no-strip-extras --no-emit-index-url --no-emit-find-links $(LOCK_ARGS) -o requirements/synth-peers.txt \
	  requirements/synth-peers.in

# Mutation testing of the privacy path (QUALITY.md), not part of `make test`: mutmut as [tool.mutmut] in
# pyproject.toml sets it up, on 2 processes, each mutant against the tests that reach it. MUTANTS='opal_dp.core.noise*'
# runs a subset, CHILDREN=1 one process (a busy machine). The mutants that no test kills are listed in
# mutants/surviving.txt.
mutation: CHILDREN ?= 2
mutation: $(STAMP)
	$(VENV)/bin/mutmut run --max-children $(CHILDREN) $(MUTANTS)
	$(VENV)/bin/mutmut export-cicd-stats
	$(VENV)/bin/mutmut results | grep -v ': not checked$$' > mutants/surviving.txt || true
	@$(PY) -c "import json; s = json.load(open('mutants/mutmut-cicd-stats.json')); \
	  run = sum(s[k] for k in ('killed', 'survived', 'timeout', 'no_tests', 'suspicious', 'segfault')); \
	  print(f\"mutation score {(s['killed'] + s['timeout']) / max(run, 1):.1%} of the {run} mutants run \
	  ({s['total']} generated): {s['killed']} killed, {s['timeout']} timed out, {s['survived']} survived, \
	  {s['no_tests']} without tests (mutants/surviving.txt)\")"

clean:
	rm -rf $(VENV) $(VENV)-lock $(SYNTH_PEERS) $(DAGSTER_HOME) test-artifacts mutants
