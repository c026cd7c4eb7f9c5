"""A node rebuilt with a new address: the fact cache (ansible.cfg keeps facts an hour) still
holds the old one. The preflight must read the node as it is now, not refuse a good inventory.

The facts are gathered for real into a cache of this test's own, then made stale: every
node's addresses are replaced with 10.99.0.1, as a removed container's facts would hold."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
from bare_cluster import BIN_DIR, PROJECT_DIR, Cluster, PlaybookRun

STALE_ADDRESS = "10.99.0.1"


def make_stale(cache: Path) -> int:
    """Replace the addresses in every host's cached facts; the number of hosts changed."""
    changed = 0
    for entry in cache.iterdir():
        stored = json.loads(entry.read_text())
        # ansible-core 2.19's jsonfile cache wraps the facts in a serialized payload.
        wrapped = isinstance(stored.get("__payload__"), str)
        facts = json.loads(stored["__payload__"]) if wrapped else stored
        if "ansible_all_ipv4_addresses" not in facts:
            continue
        # As a play's own fact gathering leaves them: smart gathering then trusts the cache.
        facts["_ansible_facts_gathered"] = True
        facts["ansible_all_ipv4_addresses"] = [STALE_ADDRESS]
        facts["ansible_all_ipv6_addresses"] = []
        entry.write_text(json.dumps({"__payload__": json.dumps(facts)} if wrapped else facts))
        changed += 1
    return changed


@pytest.fixture(scope="module")
def run_with_stale_facts(
    bare_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> PlaybookRun:
    tmp = tmp_path_factory.mktemp("stale-facts")
    cache = tmp / "facts"
    cache.mkdir()
    cluster = dataclasses.replace(
        bare_cluster, env={**bare_cluster.env, "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache)}
    )
    gathered = subprocess.run(
        [str(BIN_DIR / "ansible"), "gpu_nodes", "-i", str(cluster.inventory), "-m", "setup"],
        cwd=PROJECT_DIR,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert gathered.returncode == 0, gathered.stdout + gathered.stderr
    assert make_stale(cache) == len(cluster.members), "no cached facts to make stale"
    return cluster.provision({}, tmp / "extra-vars.json", "--tags=always")


def test_the_preflight_reads_a_rebuilt_nodes_address_fresh(
    run_with_stale_facts: PlaybookRun,
) -> None:
    assert run_with_stale_facts.returncode == 0, (
        run_with_stale_facts.stdout[-4000:] + run_with_stale_facts.stderr
    )
    assert STALE_ADDRESS not in run_with_stale_facts.output
