# Corral VDI Console. The two commands README promises:
#   make demo   installs what is missing, starts the sandbox cluster, opens the app on it
#   make test   installs what is missing, runs every check and test
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Build caches live outside the clone so that a fresh clone (CI) builds incrementally.
export CORRAL_CACHE_DIR ?= $(HOME)/.cache/corral-vdi
export CARGO_TARGET_DIR ?= $(CORRAL_CACHE_DIR)/target
export PATH := $(CORRAL_CACHE_DIR)/tools/bin:$(PATH)
# Clippy compiles the workspace's own crates in every build here (RUSTC_WORKSPACE_WRAPPER, the
# hook `cargo clippy` itself uses), so linting, building and testing share one compilation of
# the dependencies instead of adding a separate check of all of them.
export RUSTC_WORKSPACE_WRAPPER := $(shell command -v clippy-driver)
APP := $(CARGO_TARGET_DIR)/debug/corral-vdi-console
SANDBOX := $(CARGO_TARGET_DIR)/debug/sandbox

.PHONY: help deps ui app demo sandbox-up sandbox-down lint bindings test test-install bench package

help:
	@echo "make demo   - open the app against a fresh local sandbox cluster"
	@echo "make test   - run every check and test (what CI runs)"
	@echo "make bench  - print benchmark figures"
	@echo "make sandbox-up / sandbox-down - start (fresh) / stop the demo sandbox alone"

deps:
	@scripts/install-deps.sh

ui: deps
	cd ui && npm run --silent build

# One feature set for build, clippy and test, so they share compiled dependencies.
app: ui
	cargo build --workspace --all-features

# (Re)starts the demo sandbox from scratch and prints its kubeconfig path last.
sandbox-up: deps
	cargo build --workspace --all-features --bin sandbox
	@$(SANDBOX) down --name demo >/dev/null 2>&1 || true
	@$(SANDBOX) up --name demo | tail -n 1 > $(CORRAL_CACHE_DIR)/demo-kubeconfig-path
	@cat $(CORRAL_CACHE_DIR)/demo-kubeconfig-path

sandbox-down:
	@$(SANDBOX) down --name demo

# The app runs against the sandbox's kubeconfig; with no display (a server, CI) it runs
# under Xvfb. Closing the window leaves the sandbox running: `make sandbox-down` stops it.
demo: app sandbox-up
	@kc=$$(cat $(CORRAL_CACHE_DIR)/demo-kubeconfig-path); \
	echo "sandbox kubeconfig: $$kc (contexts admin, alice, bob, carol)"; \
	echo "CLI: KUBECONFIG=$$kc $(CARGO_TARGET_DIR)/debug/corral-vdi pool list"; \
	if [ -n "$${DISPLAY:-}$${WAYLAND_DISPLAY:-}" ]; then KUBECONFIG=$$kc $(APP); \
	else echo "no display: running under Xvfb"; KUBECONFIG=$$kc xvfb-run -a -s "-screen 0 1280x820x24" $(APP); fi

lint: ui
	scripts/check-tauri-versions.sh
	cargo fmt --all --check
	@test -n "$$RUSTC_WORKSPACE_WRAPPER" || { echo "lint: clippy-driver is not on PATH (rustup component add clippy)" >&2; exit 1; }
	@mkdir -p $(CORRAL_CACHE_DIR)/logs
	set -o pipefail; cargo build --workspace --all-targets --all-features 2>&1 | tee $(CORRAL_CACHE_DIR)/logs/lint-build.log
	@if grep -q '^warning' $(CORRAL_CACHE_DIR)/logs/lint-build.log; then echo "lint: the build above has warnings (clippy or rustc); each one fails the lint" >&2; exit 1; fi
	cd ui && npm run --silent lint && npm run --silent format:check && npm run --silent typecheck

# The UI's TypeScript types are generated from the Rust types (ts-rs) during `cargo test`;
# a stale checked-in copy fails the build.
# (The workspace's feature set and test targets, as the lint's build: `-p vdi-core` alone
# would unify features differently and compile much of the tree a second time.)
bindings:
	cargo test --quiet --workspace --all-features --lib export_bindings >/dev/null
	@test -z "$$(git status --porcelain -- ui/src/bindings)" || { git status --short -- ui/src/bindings; echo "ui/src/bindings is stale: commit the regenerated files"; exit 1; }

test: lint app bindings
	cd ui && npm run --silent test
	scripts/test-rust.sh
	$(MAKE) test-install

# The installers, tried as a user would (scripts/test-install.sh): needs root or sudo. They
# hold the debug binaries `make app` built (scripts/package.sh --debug), so the test compiles
# nothing again; `make package` builds the release installers.
test-install: app
	scripts/package.sh --debug
	scripts/test-install.sh

bench: deps ui
	cargo bench -p corral-tests --bench list_scale
	cargo bench -p corral-tests --bench claims
	cargo bench -p corral-tests --bench pool_create
	cargo bench -p corral-tests --bench capacity
	cargo bench -p corral-tests --bench connect
	cargo build --release --locked -p corral-vdi-console -p corral-vdi -p corral-blank-app
	cargo bench -p corral-tests --bench startup
	cargo bench -p corral-tests --bench ui_scale

# Linux installers (.deb, .rpm) in dist/, with the app and the CLI; prints them and their sizes.
package: ui
	scripts/package.sh
