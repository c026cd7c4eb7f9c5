"""The team in Slurm's accounting (plugins/module_utils/provision/slurm_people.py): what
sacctmgr must add for each person, from what it lists. The rows are sacctmgr 22.05's
--noheader --parsable2 output: SANDBOX is what the sandbox printed once slurm.yml had added the
team (test_slurm.py prints it); the others are that output with lines taken away."""

from __future__ import annotations

from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.slurm_people import (
    AccountChanges,
    account_changes,
    parse_parsable2,
    sacctmgr_commands,
)

# show associations cluster=torch format=account,user
SANDBOX = "root|\nroot|root\nteam|\nteam|alice\nteam|bob\nteam|torch\n"
# Before the role ran: root's account and association alone (sacctmgr makes them with the
# cluster); and before bob was listed.
FRESH = "root|\nroot|root\n"
WITH_TEAM = SANDBOX.replace("team|bob\n", "")


def changes(associations: str, users: list[str], **known: list[str]) -> AccountChanges:
    return account_changes(
        known.get("clusters", ["torch"]),
        known.get("accounts", ["root", "team"]),
        parse_parsable2(associations, 2),
        cluster="torch",
        account="team",
        users=users,
    )


def test_a_fresh_cluster_gets_the_account_and_every_person() -> None:
    found = changes(FRESH, ["torch", "alice", "bob"], accounts=["root"])
    assert found == AccountChanges(add_account=True, add_users=["torch", "alice", "bob"])
    assert sacctmgr_commands(found, cluster="torch", account="team") == [
        ["sacctmgr", "-i", "add", "account", "team", "cluster=torch",
         "description=the training cluster's people", "organization=torch-cluster"],
        ["sacctmgr", "-i", "add", "user", "torch", "account=team", "cluster=torch",
         "defaultaccount=team"],
        ["sacctmgr", "-i", "add", "user", "alice", "account=team", "cluster=torch",
         "defaultaccount=team"],
        ["sacctmgr", "-i", "add", "user", "bob", "account=team", "cluster=torch",
         "defaultaccount=team"],
    ]  # fmt: skip


def test_people_already_there_are_not_added_again() -> None:
    assert not changes(SANDBOX, ["torch", "alice", "bob"]).changed
    found = changes(WITH_TEAM, ["torch", "alice", "bob"])
    assert found == AccountChanges(add_users=["bob"])
    assert found.changed
    settled = changes(WITH_TEAM, ["torch", "alice"])
    assert (settled.changed, sacctmgr_commands(settled, cluster="torch", account="team")) == (
        False,
        [],
    )


def test_a_cluster_missing_from_the_database_is_added_first() -> None:
    found = changes("", ["torch"], clusters=[], accounts=[])
    commands = sacctmgr_commands(found, cluster="torch", account="team")
    assert [command[:4] for command in commands] == [
        ["sacctmgr", "-i", "add", "cluster"],
        ["sacctmgr", "-i", "add", "account"],
        ["sacctmgr", "-i", "add", "user"],
    ]


def test_someone_no_longer_listed_is_reported_not_removed() -> None:
    found = changes(WITH_TEAM, ["torch"])
    assert (found.unlisted, found.changed) == (["alice"], False)


def test_a_person_in_another_account_only_is_added_to_this_one() -> None:
    found = changes("root|\nroot|root\nml|carol\n", ["carol"])
    assert found.add_users == ["carol"]


def test_rows_of_another_width_and_blank_lines_are_left_out() -> None:
    assert parse_parsable2("team|alice\n\nsacctmgr: warning\nx|y|z\n", 2) == [["team", "alice"]]
