# Carico: every target works from a fresh clone; `install` is implied where it is needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install test lint unit fuzz demo bench e2e e2e-bin protos clean browser image image-test image-dockerfile real-node real-node-burst soak

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@# The repacker's compiled loops (numba, about 20 s) are built and cached now, at install,
	@# so that no user's first `carico repack` or demo pays for them.
	$(PY) -c "import repack.search.swap_kernel, repack.search.heuristics, repack.bounds.patterns"
	@touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/hadolint Dockerfile
	$(VENV)/bin/shellcheck deploy/image/*.sh tests/e2e/gobuild/*.sh

# Two workers: the e2e tier (one worker, it shares one control plane) mostly waits on its
# processes, so the other tests run beside it. Then the real node's tests alone: they measure
# this machine's CPU, and a second worker's tests would be load on the node they measure.
unit: $(STAMP)
	$(VENV)/bin/pytest -n 2 --dist loadgroup -m "not real_node"
	$(VENV)/bin/pytest -m real_node tests/e2e

# The fuzz tier with its long budget (make test runs it with a small one, within a minute): every
# input surface of docs/testing.md#fuzzing, FUZZ_EXAMPLES inputs per test, freshly drawn each run;
# prints the inputs tried and the seconds spent per surface.
FUZZ_EXAMPLES ?= 1500
fuzz: $(STAMP)
	CARICO_FUZZ=long CARICO_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VENV)/bin/pytest -n 2 -m fuzz tests/fuzz

# The real node's burst through carico-scheduler against default-scheduler alone, printing both
# runs (make test runs it among the real node's tests; docs/testing.md#real-node).
real-node-burst: $(STAMP) e2e-bin
	$(VENV)/bin/pytest -s -m real_node -k burst tests/e2e

# The chaos soak on a control plane of its own (docs/testing.md#chaos-soak): mixed workload while
# a seeded schedule kills and restarts Carico's components and the control plane's; prints the
# schedule, every fault and the invariants' report. SOAK_ARGS="--minutes 30 --seed 7"; make test
# runs a short one (tests/e2e/test_chaos_soak.py).
soak: $(STAMP) e2e-bin
	$(PY) tests/e2e/soak_run.py $(SOAK_ARGS)

# The e2e tier runs inside pytest, so the control-plane binaries must exist first.
test: lint e2e-bin browser unit

protos: $(STAMP)
	$(PY) -m protos.generate

bench: $(STAMP)
	$(PY) tests/bench/run.py $(BENCH_ARGS)

# The whole stack on 127.0.0.1 with a looping workload; prints the dashboard URL; Ctrl-C stops it.
demo: $(STAMP)
	$(VENV)/bin/carico demo $(DEMO_ARGS)

# Debian's Chromium and its driver for the dashboard's browser test (installed when missing).
browser:
	@bash tests/integration/demo/install_browser.sh

# Builds etcd and the Kubernetes control plane from pinned Go modules into .cache/e2e-bin/, the
# real node (runc, containerd, kubelet, CNI plugins, the test images' program) into
# .cache/node-bin/, and Carico's image (make image) into .cache/image/; each is reused while its
# inputs are unchanged. Fails with a clear message when Go is missing.
e2e-bin:
	@bash tests/e2e/gobuild/build.sh >/dev/null
	@bash tests/e2e/gobuild/node-build.sh >/dev/null
	@bash tests/e2e/gobuild/image.sh >/dev/null

e2e: $(STAMP) e2e-bin
	$(VENV)/bin/pytest tests/e2e

# A control plane, one real node (containerd, runc, kubelet on this machine) and Carico installed
# with its Helm chart; prints a kubeconfig and stays up until Ctrl-C, then cleans up (root needed).
real-node: $(STAMP) e2e-bin
	$(PY) tests/e2e/real_node_bed.py $(REAL_NODE_ARGS)

# The container image as an OCI layout in .cache/image/oci, built without Docker (needs root).
image:
	deploy/image/build.sh

# Runs carico inside the built image; slow, so not part of make test.
image-test:
	deploy/image/smoke.sh

# Builds the Dockerfile itself with buildah against a local Debian stand-in base (needs root).
image-dockerfile:
	deploy/image/check-dockerfile.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info

# Regenerates the derived deploy files (the chart's scheduler configuration from
# carico_app/schedconfig.py, deploy/base and deploy/overlays from the chart) with the e2e-bin helm.
.PHONY: manifests
manifests: $(STAMP) e2e-bin
	$(PY) -m carico_app.manifests --helm "$$(bash tests/e2e/gobuild/build.sh --print-dir)/helm"
