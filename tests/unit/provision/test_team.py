"""The team's members (plugins/module_utils/provision/team.py): each gets one UID and GID on
every node, after the training user and never another member's number, from the nodes'
/etc/passwd and /etc/group (a Debian 12 and a Rocky Linux 9 cloud image); the list's refusals.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.team import (
    choose_member_ids,
    member_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.training_user import (
    choose_ids,
    node_ids,
    parse_group,
    parse_passwd,
)

DATA = Path(__file__).parents[1] / "data" / "training_user"

# A key made with ssh-keygen -t ed25519 for these tests (public half only).
ALICE_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBl0i++iZbZc2w+j9VvMMChjNOFpSZpSpcstUC3gAMEr alice@laptop"
)


def node(system: str, passwd: str = "", group: str = "", members: tuple[str, ...] = ()) -> dict:
    """A node's training_user_ids answer for torch and MEMBERS, from the image's files plus the
    lines given."""
    users = parse_passwd((DATA / f"{system}-passwd").read_text() + passwd)
    groups = parse_group((DATA / f"{system}-group").read_text() + group)
    local = {entry[0] for entry in users}
    probe = node_ids("torch", users, groups, local)
    probe["members"] = {}
    for member in members:
        own = node_ids(member, users, groups, local)
        probe["members"][member] = {"user": own["user"], "group": own["group"]}
    return probe


def team(probes: dict, members: list[dict]) -> tuple[dict, list[str]]:
    """The training user's choice, then the members'."""
    torch, problems = choose_ids("torch", probes)
    assert problems == []
    return choose_member_ids(members, probes, {"torch": (torch["uid"], torch["gid"])}, id_min=2000)


def test_new_members_get_the_next_free_numbers_after_the_training_user() -> None:
    names = ("alice", "bob")
    probes = {"node0": node("debian12", members=names), "node1": node("rocky9", members=names)}
    chosen, problems = team(probes, [{"name": "alice"}, {"name": "bob"}])
    assert problems == []
    assert {n: (c["uid"], c["gid"]) for n, c in chosen.items()} == {
        "alice": (2001, 2001),
        "bob": (2002, 2002),
    }
    assert chosen["bob"]["homes"] == {"node0": "/home/bob", "node1": "/home/bob"}
    assert chosen["alice"]["create"] == ["node0", "node1"]


def test_a_member_that_exists_keeps_its_ids_and_the_others_step_around_them() -> None:
    """alice exists on node1 with 2001: she keeps it, is created with it on node0, and bob,
    new, does not get it although node0 has nothing with that number yet."""
    alice = ("alice:x:2001:2001::/home/alice:/bin/bash\n", "alice:x:2001:\n")
    names = ("alice", "bob")
    probes = {
        "node0": node("debian12", members=names),
        "node1": node("rocky9", *alice, members=names),
    }
    chosen, problems = team(probes, [{"name": "bob"}, {"name": "alice"}])
    assert problems == []
    assert (chosen["alice"]["uid"], chosen["alice"]["create"]) == (2001, ["node0"])
    assert chosen["bob"]["uid"] == 2002


def test_a_set_uid_is_used_and_one_that_a_user_has_is_refused_naming_the_member() -> None:
    probes = {"node0": node("debian12", members=("alice", "bob"))}
    chosen, problems = team(probes, [{"name": "alice", "uid": 3000}, {"name": "bob"}])
    assert (problems, chosen["alice"]["uid"], chosen["bob"]["uid"]) == ([], 3000, 2001)

    _, problems = team(probes, [{"name": "alice", "uid": 2000}])
    assert problems == [
        "UID 2000 (alice's uid in training_user_team) is taken on node0 by the user torch. "
        "Set alice's uid in training_user_team to another number, or to 0 to let the role "
        "choose one free on every node"
    ]


def test_a_member_with_different_ids_on_two_nodes_is_refused() -> None:
    probes = {
        "node0": node("debian12", "bob:x:2005:2005::/home/bob:/bin/bash\n", "bob:x:2005:\n",
                      members=("bob",)),
        "node1": node("rocky9", "bob:x:2006:2006::/home/bob:/bin/bash\n", "bob:x:2006:\n",
                      members=("bob",)),
    }  # fmt: skip
    _, problems = team(probes, [{"name": "bob"}])
    assert any("bob has different UIDs on the nodes: node0 2005, node1 2006" in p for p in problems)


def test_a_node_that_did_not_read_the_members_is_named() -> None:
    probes = {"node0": node("debian12")}
    del probes["node0"]["members"]
    assert choose_member_ids([{"name": "alice"}], probes, {}, id_min=2000) == (
        {},
        ["no users and groups were read from node0"],
    )


def test_a_good_list_has_no_problems() -> None:
    members = [{"name": "alice", "uid": 3000, "keys": [ALICE_KEY]}, {"name": "bob"}]
    assert member_problems(members, "torch") == []


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ([{"name": "Alice"}], "'Alice' in training_user_team is not a portable user name"),
        ([{"name": "torch"}], "torch in training_user_team is the training user"),
        ([{"name": "root"}], "root in training_user_team is root"),
        ([{"name": "bob"}, {"name": "bob"}], "training_user_team names bob twice"),
        ([{"name": "bob", "uid": -1}], "the uid of bob in training_user_team must be 0 (chosen)"),
        ([{"name": "bob", "uid": 65534}], "must be 0 (chosen) or 1 to 60000, got 65534"),
        (
            [{"name": "bob", "key": [ALICE_KEY]}],
            "bob in training_user_team has key, which the role",
        ),
        (
            [{"name": "bob", "keys": ALICE_KEY}],
            "the keys of bob in training_user_team must be a list",
        ),
        (
            [{"name": "bob", "keys": ["AAAAC3Nza"]}],
            "a key of bob in training_user_team is not a public",
        ),
        ([{"name": "bob", "keys": ["ssh-ed25519 not*base64"]}], "key part that is not base64"),
        # An RSA key's type with an ed25519 key's body: sshd would ignore it.
        ([{"name": "bob", "keys": ["ssh-rsa " + ALICE_KEY.split()[1]]}], "is not a ssh-rsa key"),
        ([{"name": "bob", "keys": [ALICE_KEY[:64]]}], "is cut short or is not a ssh-ed25519 key"),
        (["bob"], "training_user_team[0] must be a mapping with a name"),
    ],
)
def test_each_bad_member_is_named(members: list, words: str) -> None:
    problems = member_problems(members, "torch")
    assert any(words in p for p in problems), problems
