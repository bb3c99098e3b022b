# bertology: `make demo` and `make test` set up .venv with every dependency on first use.
# torch is pinned and installed first, so pip never resolves an unpinned (multi-GB CUDA) torch here.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TORCH := torch==2.13.0
export HF_HUB_OFFLINE ?= 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install demo test lint images clean
REGISTRY ?= ghcr.io/bertology
IMAGE_TAG ?= 0.1.0

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[demo,cluster,dev]'
	touch $(STAMP)

install: $(STAMP)

## demo: the reversed-layers study, offline, on the packaged pre-trained MiniLM (a few minutes on 2 cores)
demo: $(STAMP)
	$(VENV)/bin/bertology run workflows/reversed-layers.yaml -p preset=demo

## test: lint, then every test (unit, end-to-end through the local runner, S3 on loopback)
test: lint
	$(PY) -m pytest -q -p no:cacheprovider

## lint: ruff, and strict validation of every Argo YAML
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/bertology validate workflows/*.yaml workflows/templates/*.yaml

## images: the GPU training image and the CPU image the step library references (needs a container engine)
images:
	@docker info >/dev/null 2>&1 || { echo "make images needs a running container engine (docker info failed)"; exit 1; }
	docker build -f images/train/Dockerfile -t $(REGISTRY)/bertology-train:$(IMAGE_TAG) .
	docker build -f images/cpu/Dockerfile -t $(REGISTRY)/bertology-cpu:$(IMAGE_TAG) .

clean:
	rm -rf .bertology
