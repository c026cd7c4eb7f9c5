#!/usr/bin/python
"""Documentation of the cluster_known_vars action plugin (it runs on the controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_known_vars
short_description: Refuse inputs that no role or playbook of the collection reads
description:
  - An action plugin (plugins/action/cluster_known_vars.py) that runs on the controller and sends
    nothing to a node, so it refuses before anything changes anywhere.
  - The known names are the options of every role's meta/argument_specs.yml and the names every
    playbook of the collection reads or sets (C(nproc), C(job_id), C(follow), ...).
  - Fails, naming each lost input with the known names closest to it, on a C(-e key=value) whose
    value had spaces (Ansible leaves the rest in C(_raw_params)); on an extra var or a job file's
    key (C(-e @path)) that has a role's prefix (C(train_), C(cluster_), ...) and is not known, or,
    with I(all_extra_vars), any extra var that is not known; and on a variable with a role's prefix
    that the inventory sets for one of I(hosts) and nothing reads. Ansible's own variables
    (C(ansible_*), C(inventory_hostname), ...) and internal ones (C(__*)) pass.
  - A job file that is not a YAML mapping never gets here, Ansible refuses it before any play.
options:
  hosts:
    description:
      - The hosts whose variables are checked (their inventory's group_vars, host_vars and hosts
        file), on the controller.
    type: list
    elements: str
    default: []
  all_extra_vars:
    description:
      - Refuse every extra var that nothing knows, not only those with a role's prefix (the
        collection's own playbooks read no other; a playbook of your own may read others).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Check that every input given is one that a role or playbook reads
  torch_cluster.cluster.cluster_known_vars:
    hosts: "{{ groups[cluster_group] }}"
    all_extra_vars: true
  run_once: true
"""

RETURN = r"""
lost:
  description: One line per lost input, where it was given and the known names closest to it.
  type: list
  elements: str
  returned: failure
"""
