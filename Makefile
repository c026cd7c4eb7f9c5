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
# EL9-like nodes (group el9_nodes) beside the Debian ones: e.g. make sandbox SANDBOX_EL9_NODES=2
SANDBOX_EL9_NODES ?= 0

APT_PACKAGES := podman runc mmdebstrap openssh-client rsync iproute2 uidmap gpg \
  rpm createrepo-c dnf-plugins-core

.PHONY: help setup apt venv collection-path wheelhouse data nccl-mirror el9-repos collection sandbox-up sandbox-train demo docs docs-check lint unit molecule test sandbox sandbox-down bench-train bench-launch bench-sync bench-pairs bench-growth clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

setup: apt venv collection-path wheelhouse ## Install everything a fresh Debian machine needs (apt packages, .venv, the collection path, node wheelhouse)

apt:
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); fi

venv: $(BIN)/.installed

# This repository is the collection torch_cluster.cluster, found through ansible.cfg's
# collections_path (and pytest's pythonpath) at .cache/collections: everything imports
# its module_utils as ansible_collections.torch_cluster.cluster.plugins.module_utils.<package>.
COLLECTION_LINK := .cache/collections/ansible_collections/torch_cluster/cluster
collection-path: $(COLLECTION_LINK) ## Link this repository into .cache/collections as torch_cluster.cluster (no venv needed)

$(COLLECTION_LINK):
	mkdir -p $(@D)
	ln -sfn ../../../.. $@

$(BIN)/.installed: requirements-dev.txt requirements-train.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements-dev.txt -r requirements-train.txt
	touch $@

# The nodes install PyTorch from this folder: downloaded once, on the controller.
wheelhouse: .cache/wheelhouse/.complete

.cache/wheelhouse/.complete: requirements-train.txt
	$(BIN)/pip download -q -d .cache/wheelhouse $$(grep -vE '^(#|scikit-learn|$$)' requirements-train.txt)
	touch $@

# The sandbox keeps its own fact cache, so recreated containers never reuse
# facts of earlier ones.
SANDBOX_ENV := ANSIBLE_CACHE_PLUGIN_CONNECTION=$(CURDIR)/.sandbox/facts

# Real handwritten digits (scikit-learn's) as MNIST's raw files: the sandbox's data.
data: .cache/data/MNIST/raw/.complete

.cache/data/MNIST/raw/.complete: train/digits_mnist.py | venv
	$(BIN)/python train/digits_mnist.py --out .cache/data
	touch $@

sandbox: setup data $(if $(filter-out 0,$(SANDBOX_EL9_NODES)),el9-repos) ## Start SANDBOX_NODES (default 2) node containers and provision them over SSH
	$(BIN)/ansible-playbook sandbox/up.yml -e sandbox_nodes=$(SANDBOX_NODES) \
	  -e sandbox_el9_nodes=$(SANDBOX_EL9_NODES)
	$(SANDBOX_ENV) $(BIN)/ansible-playbook -i .sandbox/inventory.yml playbooks/provision.yml

# The sandbox, started and provisioned only when its first node is not running.
sandbox-up: ## Start the sandbox when it is not up (make sandbox, which provisions it)
	@if [ -f .sandbox/inventory.yml ] && \
	  [ "$$(podman container inspect --format '{{.State.Running}}' sandbox-node0 2>/dev/null)" = true ]; \
	then echo "The sandbox is up (.sandbox/inventory.yml)."; else $(MAKE) sandbox; fi

# e.g. make sandbox-train ARGS='-e nproc=2 -e job_id=demo'
sandbox-train: sandbox-up ## Run playbooks/train.yml on the sandbox, brought up first when it is not (ARGS='-e nproc=2 ...')
	$(SANDBOX_ENV) $(BIN)/ansible-playbook -i .sandbox/inventory.yml playbooks/train.yml $(ARGS)

# A newcomer's first job: the sandbox (brought up when it is not), then a short
# job of the example trainer, its output followed live, its results in runs/.
DEMO_JOB := $(or $(DEMO_JOB),demo-$(shell date +%Y%m%d-%H%M%S))
demo: sandbox-up ## The sandbox (brought up when it is not) and a short job on it, followed live
	$(SANDBOX_ENV) $(BIN)/ansible-playbook -i .sandbox/inventory.yml playbooks/train.yml \
	  -e @jobs/example.yml -e nproc=2 -e job_id=$(DEMO_JOB) -e train_follow=true
	@echo "Results: runs/$(DEMO_JOB)/ (loss.png, progress.png, metrics.json, each node's log)."
	@echo "Jobs: $(SANDBOX_ENV) $(BIN)/ansible-playbook -i .sandbox/inventory.yml playbooks/jobs.yml"

sandbox-down: ## Remove the sandbox containers, network and state
	$(BIN)/ansible-playbook sandbox/down.yml

docs: venv ## Write docs/variables.md, the role variable reference, from roles/*/meta/argument_specs.yml
	$(BIN)/python docs/variables.py

docs-check: venv ## Fail when docs/variables.md is not what make docs writes
	$(BIN)/python docs/variables.py --check

lint: venv collection-path docs-check ## ansible-lint (production profile), yamllint, ruff, the CI workflow's schema, syntax checks, docs-check
	$(BIN)/yamllint -s .
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/ansible-lint --profile production
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	for p in playbooks/*.yml sandbox/*.yml; do $(BIN)/ansible-playbook --syntax-check "$$p"; done

unit: setup ## Trainer and preflight tests (real torchrun jobs; a bare sandbox for the preflight)
	@date -u '+== unit starts at %T UTC'
	$(BIN)/pytest tests

# A local mirror of NVIDIA's CUDA apt repository (libnccl2, libnccl-dev, cuda-keyring), made
# from the NCCL in torch's nvidia-nccl wheel, so that the sandbox runs the nccl role for real.
nccl-mirror: .cache/nccl-mirror/.complete

.cache/nccl-mirror/.complete: sandbox/nccl_mirror.py .cache/wheelhouse/.complete
	$(BIN)/python sandbox/nccl_mirror.py --cuda 13.0 --out .cache/nccl-mirror \
	  --wheel $$(ls .cache/wheelhouse/nvidia_nccl_cu13-*.whl)
	touch $@

# Local signed RPM repositories like an EL9 node's (Rocky's, EPEL's, NVIDIA's CUDA with the
# nvidia-driver module streams), for the sandbox's EL9-like nodes (sandbox/el9_repos.py).
el9-repos: .cache/el9-repos/.complete

.cache/el9-repos/.complete: sandbox/el9_repos.py .cache/wheelhouse/.complete
	$(BIN)/python sandbox/el9_repos.py --out .cache/el9-repos \
	  --wheel $$(ls .cache/wheelhouse/nvidia_nccl_cu13-*.whl)
	touch $@

# The collection (galaxy.yml), as users install it.
collection: venv ## Build the torch_cluster.cluster collection into .cache/collection
	$(BIN)/ansible-galaxy collection build --force --output-path .cache/collection

molecule: setup data nccl-mirror el9-repos ## The sandbox scenario: create, converge, idempotence, verify, destroy
	rm -f .cache/verify-junit.xml
	@date -u '+== molecule starts at %T UTC'
	cd $(CURDIR) && $(BIN)/molecule test -s sandbox || { df -h . /var/lib/containers; \
	  $(BIN)/python sandbox/failed_tests.py .cache/verify-junit.xml; exit 1; }

test: lint unit molecule ## Everything CI runs

bench-train: setup ## Trainer against the guide's pipeline: samples/s and accuracy, 2 CPU ranks
	$(BIN)/python train/bench/bench.py

bench-launch: ## On a running sandbox: train.yml's launch overhead against torchrun by hand, and teardown after a fault
	$(BIN)/python sandbox/bench/launch.py

bench-sync: ## On a running sandbox: what keeping output folders in step costs without a shared folder (100 MB, 1 GB)
	$(BIN)/python sandbox/bench/sync.py

bench-growth: setup data ## Fresh sandboxes of 2 and 4 nodes, one after the other: provision (cold, warm), check, train times, and the staging's bytes
	$(BIN)/python sandbox/bench/growth.py

bench-pairs: venv collection-path ## On this machine: how check.yml's pair measurements grow with the nodes (2, 4, 8 local torchrun agents)
	$(BIN)/python sandbox/bench/pairs.py

clean: sandbox-down ## Remove the sandbox, .venv and caches
	rm -rf $(VENV) .cache
