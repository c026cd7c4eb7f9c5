# One entry point for developers and CI. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export CONTAINERS_CONF := $(CURDIR)/sandbox/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

SANDBOX_NODES ?= 2
export SANDBOX_NODES

APT_PACKAGES := podman runc mmdebstrap openssh-client rsync iproute2 uidmap

.PHONY: help setup apt venv wheelhouse lint unit molecule test sandbox sandbox-down bench-train clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

setup: apt venv wheelhouse ## Install everything a fresh Debian machine needs (apt packages, .venv, node wheelhouse)

apt:
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); fi

venv: $(BIN)/.installed

$(BIN)/.installed: requirements-dev.txt requirements-train.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements-dev.txt -r requirements-train.txt
	touch $@

# The nodes install PyTorch from this folder: downloaded once, on the controller.
wheelhouse: .cache/wheelhouse/.complete

.cache/wheelhouse/.complete: requirements-train.txt
	$(BIN)/pip download -q -d .cache/wheelhouse $$(grep -vE '^(#|scikit-learn|$$)' requirements-train.txt)
	touch $@
