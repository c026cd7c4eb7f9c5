#!/usr/bin/python
"""Documentation of the training_user_choice action plugin (nothing of it runs as a module)."""

DOCUMENTATION = r"""
module: training_user_choice
short_description: Choose the training user's UID and GID, the same on every node
description:
  - Runs on the controller (an action plugin), once, from what the training_user_ids module
    read on every node. Changes nothing.
  - Where the user exists, its UID and GID are kept, and must be the same on every node that
    has it and free on those that lack it. Where it exists nowhere, the lowest number from
    O(id_min) on that is free both as a UID and as a GID on every node. Ids the inventory sets
    are checked against both.
  - Fails, naming each node and its ids, when the ids cannot be the same everywhere, and on
    a user name, home or shell the role cannot use.
options:
  name:
    description: The training user.
    type: str
    required: true
  uid:
    description: The UID to give it; 0 to choose.
    type: int
    default: 0
  gid:
    description: The GID of its group; 0 to choose.
    type: int
    default: 0
  id_min:
    description: The lowest number the choice takes.
    type: int
    default: 2000
  home:
    description: Its home; empty for /home/<name> where it is created.
    type: str
    default: ""
  shell:
    description: Its login shell (checked to be an absolute path).
    type: str
    required: true
  probes:
    description: Each node's training_user_ids result, by inventory hostname.
    type: dict
    required: true
  members:
    description:
      - The team's members (training_user_team), each a dict with C(name), and optionally C(uid)
        (0 to choose) and C(keys) (public keys). Each gets one UID and GID on every node,
        chosen after the training user's, none the same as another's.
    type: list
    elements: dict
    default: []
"""

RETURN = r"""
uid:
  description: The user's UID on every node.
  type: int
  returned: success
gid:
  description: The GID of its group on every node.
  type: int
  returned: success
homes:
  description: Its home, by node (a node where it exists keeps its own).
  type: dict
  returned: success
create:
  description: The nodes where the user does not exist yet.
  type: list
  returned: success
members:
  description: Each member's name to its own uid, gid, homes and create, as above.
  type: dict
  returned: success
problems:
  description: One sentence per reason the ids cannot be chosen.
  type: list
  returned: failure
"""
