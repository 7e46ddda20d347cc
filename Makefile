# Two commands for a newcomer: `make release` and `make test`. Only Python 3.11 is assumed.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export DAGSTER_HOME := $(CURDIR)/.dagster_home

CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: release test ui ui-readonly bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $@

$(DAGSTER_HOME): | $(STAMP)
	@$(PY) -m opal_dp.cli dagster-home $@ >/dev/null

# make release PRIVACY_UNIT=card_day (or card_period); default: trip, the 2016 release
release: $(STAMP) | $(DAGSTER_HOME)
	$(PY) -m opal_dp.cli release $(if $(PRIVACY_UNIT),--privacy-unit $(PRIVACY_UNIT))

# The browser test drives Debian's Chromium (Playwright cannot download browsers here).
$(CHROMIUM):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq chromium

test: $(STAMP) $(CHROMIUM)
	$(PY) -m pytest

# The UI shows internal, non-DP figures: it binds to this machine only (UI_HOST=0.0.0.0 exposes it).
UI_HOST ?= 127.0.0.1
ui: $(STAMP) | $(DAGSTER_HOME)
	$(VENV)/bin/dagster dev -w workspace.yaml -h $(UI_HOST)

# For people who look but must not launch or wipe anything (it still shows the internal figures: see README).
ui-readonly: $(STAMP) | $(DAGSTER_HOME)
	$(VENV)/bin/dagster-webserver -w workspace.yaml -h $(UI_HOST) --read-only

# The peer libraries the benchmark runs are the `bench` extra.
BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	@touch $@

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(DAGSTER_HOME) test-artifacts
