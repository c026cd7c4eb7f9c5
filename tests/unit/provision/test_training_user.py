"""The training user's ids (plugins/module_utils/provision/training_user.py): one UID and GID
chosen for every node from their /etc/passwd and /etc/group (a Debian 12 and a Rocky Linux 9
cloud image), the refusals that name each node and its ids, the inputs, and the GPU groups.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.training_user import (
    choose_ids,
    gpu_access,
    input_problems,
    node_ids,
    parse_group,
    parse_passwd,
)

DATA = Path(__file__).parents[1] / "data" / "training_user"


def node(
    system: str = "debian12",
    passwd: str = "",
    group: str = "",
    *,
    name: str = "torch",
    local: bool = True,
    drop_groups: tuple[str, ...] = (),
) -> dict:
    """A node's training_user_ids answer, from the image's files plus the lines given."""
    users = parse_passwd((DATA / f"{system}-passwd").read_text() + passwd)
    groups = [
        entry
        for entry in parse_group((DATA / f"{system}-group").read_text() + group)
        if entry[0] not in drop_groups
    ]
    local_users = {entry[0] for entry in users} if local else set()
    return node_ids(name, users, groups, local_users)


TORCH = "torch:x:{uid}:{gid}::{home}:/bin/bash\n"


def torch(uid: int, gid: int, home: str = "/home/torch") -> tuple[str, str]:
    """The passwd and group lines of a torch user that exists already."""
    return TORCH.format(uid=uid, gid=gid, home=home), f"torch:x:{gid}:\n"


def test_a_new_user_gets_the_lowest_number_free_everywhere_as_uid_and_gid() -> None:
    probes = {"node0": node("debian12"), "node1": node("rocky9"), "node2": node("debian12")}
    choice, problems = choose_ids("torch", probes)
    assert problems == []
    assert (choice["uid"], choice["gid"]) == (2000, 2000)
    assert choice["homes"] == dict.fromkeys(probes, "/home/torch")
    assert choice["create"] == ["node0", "node1", "node2"]


def test_a_number_taken_as_a_uid_on_one_node_and_a_gid_on_another_is_skipped() -> None:
    probes = {
        "node0": node("debian12", "ops:x:2000:1000:Ops:/home/ops:/bin/bash\n"),
        "node1": node("rocky9", group="datasci:x:2001:rocky\n"),
    }
    choice, _ = choose_ids("torch", probes)
    assert (choice["uid"], choice["gid"]) == (2002, 2002)


def test_a_primary_gid_without_a_group_entry_counts_as_taken() -> None:
    probes = {"node0": node("debian12", "legacy:x:1500:2000::/home/legacy:/bin/sh\n")}
    choice, _ = choose_ids("torch", probes)
    assert (choice["uid"], choice["gid"]) == (2001, 2001)


def test_the_choice_starts_at_training_user_id_min() -> None:
    choice, _ = choose_ids("torch", {"node0": node("rocky9")}, id_min=1000)
    assert (choice["uid"], choice["gid"]) == (1001, 1001)


def test_an_existing_user_keeps_its_ids_and_home_and_is_created_where_missing() -> None:
    passwd, group = torch(1005, 1005, home="/srv/torch")
    probes = {"node0": node("debian12", passwd, group), "node1": node("rocky9")}
    choice, problems = choose_ids("torch", probes)
    assert problems == []
    assert (choice["uid"], choice["gid"]) == (1005, 1005)
    assert choice["homes"] == {"node0": "/srv/torch", "node1": "/home/torch"}
    assert choice["create"] == ["node1"]


def test_a_second_run_keeps_the_ids_it_chose_and_creates_nothing() -> None:
    probes = {
        "node0": node("debian12", *torch(2000, 2000)),
        "node1": node("rocky9", *torch(2000, 2000)),
    }
    choice, problems = choose_ids("torch", probes, uid=2000, gid=2000)
    assert problems == []
    assert (choice["uid"], choice["gid"], choice["create"]) == (2000, 2000, [])


def test_users_whose_ids_differ_between_nodes_are_refused_naming_each_node() -> None:
    probes = {
        "node0": node("debian12", *torch(2000, 2000)),
        "node1": node("rocky9", *torch(1001, 1001)),
        "node2": node("rocky9"),
    }
    choice, problems = choose_ids("torch", probes)
    assert choice is None
    assert (
        "torch has different UIDs on the nodes: node0 2000, node1 1001; none on node2"
        in (problems[0])
    )
    assert "different GIDs on the nodes: node0 2000, node1 1001" in problems[1]
    assert "usermod -u UID torch" in problems[0]


def test_an_existing_users_uid_taken_on_a_node_that_lacks_it_names_the_other_user() -> None:
    probes = {
        "node0": node("debian12", *torch(2000, 2000)),
        "node1": node("rocky9", "alice:x:2000:1000::/home/alice:/bin/bash\n"),
    }
    choice, (problem,) = choose_ids("torch", probes)
    assert choice is None
    assert problem.startswith("UID 2000 (its UID on node0) is taken on node1 by the user alice.")
    assert "give the user alice another number on node1" in problem


@pytest.mark.parametrize("var", ["uid", "gid"])
def test_a_set_id_that_the_existing_user_does_not_have_is_refused(var: str) -> None:
    probes = {"node0": node("debian12", *torch(2000, 2000)), "node1": node("rocky9")}
    choice, (problem,) = choose_ids("torch", probes, **{var: 3000})
    assert choice is None
    kind = var.upper()
    assert problem.startswith(f"training_user_{var} is 3000, but torch has {kind} 2000 on node0.")
    assert f"Set training_user_{var}: 2000 (or 0) to keep it" in problem
    assert "left to a number nobody has" in problem
    assert "chown -h UID" in problem


def test_a_set_uid_that_another_user_has_names_it_and_the_node() -> None:
    probes = {"node0": node("debian12"), "node1": node("rocky9")}
    choice, problems = choose_ids("torch", probes, uid=1000, gid=3000)
    assert choice is None
    assert [p.split(".")[0] for p in problems] == [
        "UID 1000 (training_user_uid) is taken on node0 by the user debian",
        "UID 1000 (training_user_uid) is taken on node1 by the user rocky",
    ]
    assert "Set training_user_uid to another number, or to 0" in problems[0]


def test_a_set_gid_that_another_group_has_names_it_on_every_node() -> None:
    probes = {"node0": node("debian12"), "node1": node("rocky9")}
    choice, problems = choose_ids("torch", probes, uid=3000, gid=100)
    assert choice is None
    assert [p.split(".")[0] for p in problems] == [
        "GID 100 (training_user_gid) is taken on node0 by the group users",
        "GID 100 (training_user_gid) is taken on node1 by the group users",
    ]


def test_a_set_uid_gives_its_number_to_the_group_when_free() -> None:
    choice, _ = choose_ids("torch", {"node0": node("rocky9")}, uid=4242)
    assert (choice["uid"], choice["gid"]) == (4242, 4242)


def test_a_set_uid_whose_number_is_a_taken_gid_leaves_the_group_the_lowest_free() -> None:
    probes = {"node0": node("rocky9", group="lab:x:4242:\n")}
    choice, _ = choose_ids("torch", probes, uid=4242)
    assert (choice["uid"], choice["gid"]) == (4242, 2000)


def test_both_ids_set_and_free_are_used_as_they_are() -> None:
    choice, problems = choose_ids("torch", {"node0": node("rocky9")}, uid=1500, gid=1600)
    assert problems == []
    assert (choice["uid"], choice["gid"]) == (1500, 1600)


def test_a_group_of_the_users_name_without_the_user_keeps_its_gid() -> None:
    probes = {"node0": node("debian12", group="torch:x:3100:\n"), "node1": node("rocky9")}
    choice, problems = choose_ids("torch", probes)
    assert problems == []
    assert (choice["uid"], choice["gid"]) == (3100, 3100)


def test_groups_of_the_users_name_with_different_gids_are_refused() -> None:
    probes = {
        "node0": node("debian12", group="torch:x:3100:\n"),
        "node1": node("rocky9", group="torch:x:3200:\n"),
    }
    choice, (problem,) = choose_ids("torch", probes)
    assert choice is None
    assert problem.startswith("torch has different GIDs on the nodes: node0 3100, node1 3200.")


def test_a_user_whose_primary_group_is_another_is_refused() -> None:
    probes = {"node0": node("rocky9", "torch:x:2000:100::/home/torch:/bin/bash\n")}
    choice, (problem,) = choose_ids("torch", probes)
    assert choice is None
    assert problem.startswith("on node0, torch's primary group is the group users (GID 100)")
    assert "usermod -g torch torch" in problem


def test_a_user_whose_own_group_has_another_gid_is_refused() -> None:
    probes = {
        "node0": node("rocky9", "torch:x:2000:2000::/home/torch:/bin/bash\n", "torch:x:2001:\n")
    }
    _, (problem,) = choose_ids("torch", probes)
    assert problem.startswith(
        "on node0, torch's primary group is a GID without a group (GID 2000), and the group "
        "torch has GID 2001"
    )


def test_a_user_from_a_directory_service_is_refused() -> None:
    probes = {"node0": node("debian12", *torch(2000, 2000), local=False)}
    _, (problem,) = choose_ids("torch", probes)
    assert problem.startswith("torch on node0 comes from a directory service (LDAP, SSSD)")
    assert "training_user_enabled: false" in problem


def test_a_set_home_that_an_existing_user_does_not_have_is_refused() -> None:
    probes = {"node0": node("debian12", *torch(2000, 2000)), "node1": node("rocky9")}
    choice, (problem,) = choose_ids("torch", probes, home="/data/torch")
    assert choice is None
    assert problem.startswith(
        "training_user_home is /data/torch, but torch's home on node0 is /home/torch"
    )
    assert "usermod -m -d /data/torch torch" in problem


def test_a_set_home_is_every_new_users_home() -> None:
    choice, _ = choose_ids("torch", {"node0": node("rocky9")}, home="/data/torch")
    assert choice["homes"] == {"node0": "/data/torch"}


def test_a_node_without_an_answer_is_named() -> None:
    probes = {"node0": node("debian12"), "node1": {"unreachable": True}}
    assert choose_ids("torch", probes) == (
        None,
        ["no users and groups were read from node1"],
    )


def test_no_free_number_up_to_the_top_of_the_range_is_refused() -> None:
    probes = {"node0": node("debian12", "last:x:60000:60000::/home/last:/bin/sh\n")}
    choice, (problem,) = choose_ids("torch", probes, id_min=60000)
    assert choice is None
    assert problem.startswith("no number from training_user_id_min (60000) to 60000 is free")


GOOD = {"home": "", "shell": "/bin/bash", "uid": 0, "gid": 0, "id_min": 2000}


@pytest.mark.parametrize("name", ["torch", "_ml", "ml-ops", "a" * 32])
def test_good_inputs_have_no_problems(name: str) -> None:
    assert input_problems(name, **GOOD) == []


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"name": "Torch"}, "training_user_name 'Torch' is not a portable user name"),
        ({"name": "9lives"}, "is not a portable user name"),
        ({"name": "a" * 33}, "32 characters at most"),
        ({"name": "ml.ops"}, "is not a portable user name"),
        ({"home": "home/torch"}, "training_user_home must be empty (/home/<name>) or an absolute"),
        ({"home": "/"}, "training_user_home must be empty"),
        ({"home": "/home/../root"}, "without . or .."),
        ({"home": "/home/a:b"}, "training_user_home must be empty"),
        ({"shell": "bash"}, "training_user_shell must be an absolute path (got 'bash')"),
        ({"uid": 65534}, "training_user_uid must be 0 (chosen) or a number from 1 to"),
        ({"gid": -1}, "training_user_gid must be 0 (chosen)"),
        ({"id_min": 500}, "training_user_id_min must be within the regular users' range"),
        ({"id_min": 70000}, "1000 to 60000"),
    ],
)
def test_each_bad_input_is_named(changes: dict, words: str) -> None:
    inputs = {"name": "torch", **GOOD, **changes}
    (problem,) = input_problems(inputs.pop("name"), **inputs)
    assert words in problem


def test_the_passwd_parser_skips_comments_nis_lines_and_broken_lines() -> None:
    text = (
        "# local\nroot:x:0:0:root:/root:/bin/bash\n+@netgroup::::::\nbad:x:y:0::/:/bin/sh\nshort\n"
    )
    assert parse_passwd(text) == [("root", 0, 0, "/root")]
    assert parse_group("wheel:x:10:a,b\n+:::\nbroken:x::\n") == [("wheel", 10)]


def test_a_nodes_answer_names_the_users_own_entry_and_its_primary_group() -> None:
    probe = node("rocky9", *torch(2000, 2000))
    assert probe["user"] == {
        "uid": 2000,
        "gid": 2000,
        "home": "/home/torch",
        "group": "torch",
        "local": True,
    }
    assert probe["group"] == 2000
    assert probe["users"]["rocky"] == [1000, 1000]
    assert probe["groups"]["render"] == 998
    assert node("rocky9")["user"] is None


RENDER = {"path": "/dev/dri/renderD128", "group": "render", "mode": "0660"}
CARD = {"path": "/dev/dri/card0", "group": "video", "mode": "0660"}
NVIDIA = {"path": "/dev/nvidia0", "group": "root", "mode": "0666"}


def test_the_user_joins_the_gpu_groups_that_exist_and_can_open_every_device() -> None:
    groups = node("debian12")["groups"]
    access = gpu_access("torch", ["video", "render"], groups, [CARD, RENDER, NVIDIA])
    assert access == {"gpu_groups": ["video", "render"], "gpu_groups_missing": [], "notes": []}


def test_a_gpu_group_missing_on_a_node_is_skipped_and_its_devices_reported() -> None:
    groups = node("debian12", drop_groups=("render",))["groups"]
    access = gpu_access("torch", ["video", "render"], groups, [CARD, RENDER, NVIDIA])
    assert (access["gpu_groups"], access["gpu_groups_missing"]) == (["video"], ["render"])
    assert access["notes"] == [
        "no group render on this node: torch is not added to it",
        "torch cannot open /dev/dri/renderD128 (group render, not readable and writable by all): "
        "add render to training_user_gpu_groups",
    ]


def test_no_gpu_groups_wanted_leaves_the_user_in_none() -> None:
    access = gpu_access("torch", [], node("rocky9")["groups"], [NVIDIA])
    assert access == {"gpu_groups": [], "gpu_groups_missing": [], "notes": []}
