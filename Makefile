# The verbs a person types. Everything runs from the project's own virtualenv (.venv, made by
# `make setup` over Debian's python3 so that Debian's mininet is importable).
SHELL := /bin/bash
PY := .venv/bin/python
TESTBED := .venv/bin/testbed
SCENARIO ?= default
PROFILE ?=
KERNEL ?=
TESTBED_ARGS ?=
# CLUSTER=local:4 | ssh:playbooks/inventory/lab.ini | slurm:cluster.yaml spreads the runs (docs/cluster.md)
CLUSTER ?=
override TESTBED_ARGS += $(if $(CLUSTER),--cluster $(CLUSTER))
# a cluster needs Dask, which only the full setup installs (make setup-experiment leaves it out)
RUN_SETUP := $(if $(CLUSTER),setup,setup-experiment)

.PHONY: help setup setup-experiment experiment reproduce explain regress regress-series bisect run test test-unit test-netns test-guest test-vagrant bench lint clean lock kernel box

help:
	@echo "make setup        install everything: what experiments need, and the tests', lint's and the lab VM's tools"
	@echo "make setup-experiment   only what experiments need (make experiment, run, reproduce, regress, bench do this)"
	@echo "make experiment   run the default quick suite in a real-kernel guest and write the report"
	@echo "make explain CLAIM=ID   why a claim is not reproduced: its condition with each factor set as the paper had it"
	@echo "make reproduce    every experiment's sweep (PROFILE=quick, the default, or full); prints the estimate first"
	@echo "  ... BUDGET=60m  then more seeds where they decide undecided claims, within that time (quick only)"
	@echo "make regress BASELINE=6.1.0-55 CANDIDATE=6.1.0-56 [REPEAT=5] [SUITE=regression]   kernel regression verdict"
	@echo "  ... LATEST=6.1 instead: the newest installable 6.1 kernel against the newest one already run (cron, CI)"
	@echo "make regress-series SERIES=6.1.0-47..6.1.0-56 [REPEAT=5] [SUITE=regression]   a kernel series and its change points"
	@echo "make bisect GOOD=6.1.0-47 BAD=6.1.0-56 [POINT=id] [METRIC=goodput] [SUITE=regression]   the first version that moved"
	@echo "make run SCENARIO=name [PROFILE=quick|full] [KERNEL=6.1.0-56]   run any scenario"
	@echo "  ... CLUSTER=local:N|ssh:INVENTORY|slurm:FILE on experiment, run, reproduce, explain, regress: runs spread over a Dask cluster"
	@echo "make test         all test tiers: unit, netns (host kernel), guest (Debian kernel under qemu), vagrant (lab VM)"
	@echo "make test-unit | test-netns | test-guest | test-vagrant   one tier"
	@echo "  ... REQUIRE_TIERS=1 (as CI=true): a tier whose prerequisites are missing, or whose every test skipped, fails"
	@echo "make bench        speed and fidelity figures, printed and written to bench/"
	@echo "make lint         ruff, import contracts (import-linter), yamllint, ansible-lint"
	@echo "make clean        remove leftovers of killed runs and caches (never results/)"
	@echo "make kernel       a full Debian 6.1 kernel with the instrumented tcp_westwood.c, as a .deb"
	@echo "make box          build the lab VM's Vagrant box locally (Debian 12, mmdebstrap) and add it"

# Setup by purpose: the verbs that run experiments install only what runs need; the tests, lint
# and the lab VM's box install the rest too (scripts/setup.sh says what and why).
setup:
	@scripts/setup.sh all

setup-experiment:
	@scripts/setup.sh experiment

experiment: $(RUN_SETUP)
	$(TESTBED) suite $(or $(SUITE),default) $(if $(KERNEL),--kernel $(KERNEL)) $(TESTBED_ARGS)

reproduce: $(RUN_SETUP)
	@PROFILE=$(or $(PROFILE),quick) BUDGET="$(BUDGET)" TESTBED_ARGS="$(TESTBED_ARGS)" scripts/reproduce.sh

explain: $(RUN_SETUP)
	@[ -n "$(CLAIM)" ] || { echo "make explain CLAIM=ID [SEEDS=3] [FACTORS=a,b]: give a claim id (testbed explain --help)"; exit 2; }
	$(TESTBED) explain $(CLAIM) --seeds $(or $(SEEDS),3) $(if $(FACTORS),--factors $(FACTORS)) $(TESTBED_ARGS)

regress: $(RUN_SETUP)
	@{ [ -n "$(BASELINE)" ] && [ -n "$(CANDIDATE)" ]; } || [ -n "$(LATEST)" ] || { echo "usage: make regress BASELINE=6.1.0-55 CANDIDATE=6.1.0-56 | LATEST=6.1 [BASELINE=...] [REPEAT=5] [SUITE=regression] ('.venv/bin/testbed kernels' lists the versions)" >&2; exit 2; }
	$(TESTBED) regress $(if $(LATEST),--latest $(LATEST)) $(if $(BASELINE),--baseline $(BASELINE)) $(if $(CANDIDATE),--candidate $(CANDIDATE)) $(if $(SUITE),--suite $(SUITE)) $(if $(REPEAT),--repeat $(REPEAT)) $(TESTBED_ARGS)

regress-series: $(RUN_SETUP)
	@[ -n "$(SERIES)" ] || { echo "usage: make regress-series SERIES=6.1.0-47..6.1.0-56 (or A,B,C) [REPEAT=5] [SUITE=regression]" >&2; exit 2; }
	$(TESTBED) regress --series $(SERIES) $(if $(SUITE),--suite $(SUITE)) $(if $(REPEAT),--repeat $(REPEAT)) $(TESTBED_ARGS)

bisect: $(RUN_SETUP)
	@[ -n "$(GOOD)" ] && [ -n "$(BAD)" ] || { echo "usage: make bisect GOOD=6.1.0-47 BAD=6.1.0-56 [POINT=id] [METRIC=goodput] [SUITE=regression]" >&2; exit 2; }
	$(TESTBED) bisect --good $(GOOD) --bad $(BAD) $(if $(POINT),--point $(POINT)) $(if $(METRIC),--metric $(METRIC)) $(if $(SUITE),--suite $(SUITE)) $(if $(REPEAT),--repeat $(REPEAT)) $(TESTBED_ARGS)

run: $(RUN_SETUP)
	$(TESTBED) run $(SCENARIO) $(if $(PROFILE),--profile $(PROFILE)) $(if $(KERNEL),--kernel $(KERNEL)) $(TESTBED_ARGS)

test: setup
	@scripts/pytest-tier.sh $(if $(REQUIRE_TIERS),--require-tiers) all

test-unit: setup
	@scripts/pytest-tier.sh $(if $(REQUIRE_TIERS),--require-tiers) unit

test-netns: setup
	@scripts/pytest-tier.sh $(if $(REQUIRE_TIERS),--require-tiers) netns

test-guest: setup
	@scripts/pytest-tier.sh $(if $(REQUIRE_TIERS),--require-tiers) guest

test-vagrant: setup
	@scripts/pytest-tier.sh $(if $(REQUIRE_TIERS),--require-tiers) vagrant

bench: setup-experiment
	$(TESTBED) bench $(if $(KERNEL),--kernel $(KERNEL))

lint: setup
	$(PY) -m ruff check testbed topologies analysis tests
	$(PY) -m ruff format --check testbed topologies analysis tests
	.venv/bin/lint-imports --no-logo
	yamllint -s -c .yamllint playbooks scenarios
	cd playbooks && ansible-lint --offline -p host.yml site.yml

clean:
	-@[ -x $(TESTBED) ] && $(TESTBED) cleanup
	rm -rf .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +

# A full kernel with kernel-patch/0001-tcp_westwood-instrument.patch (kernel-patch/build-kernel.sh);
# KERNEL_CONFIG=debian builds every module of Debian's config (hours on 2 cores).
kernel:
	$(MAKE) -C kernel-patch kernel $(if $(KERNEL_CONFIG),KERNEL_CONFIG=$(KERNEL_CONFIG))

# The lab VM's box (scripts/build-box.sh); `vagrant up` builds it itself when it is missing.
box: setup
	scripts/build-box.sh

lock:
	rm -rf /tmp/cc-testbed-lock && /usr/bin/python3 -m venv /tmp/cc-testbed-lock
	/tmp/cc-testbed-lock/bin/pip install -q -e '.[dev,labs,cluster]'
	{ echo "# Pinned Python dependencies: pip freeze of pyproject.toml's deps + dev, labs and cluster extras."; \
	  echo "# Regenerate: make lock"; /tmp/cc-testbed-lock/bin/pip freeze --exclude-editable; } > requirements.lock
