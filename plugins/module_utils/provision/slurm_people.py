"""The team in Slurm's accounting: the cluster, one account, and an association (account, user)
for each person, which AccountingStorageEnforce=associations makes the list of who may run jobs,
and which fair share counts usage by.

What to add is decided here from what sacctmgr lists; the slurm_associations module runs
sacctmgr. People who have an association in the account but are no longer listed are reported,
not removed: their jobs' records stay theirs, and a running job of theirs would refuse it.

Standard library only: runs on the controller node's system Python (3.9 on EL9).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field


def parse_parsable2(text: str, width: int) -> list[list[str]]:
    """The rows of sacctmgr --noheader --parsable2 output with WIDTH fields each ("a|b"), with
    blank lines and rows of another width left out."""
    rows = []
    for line in text.splitlines():
        fields = line.split("|")
        if line.strip() and len(fields) == width:
            rows.append(fields)
    return rows


@dataclass
class AccountChanges:
    """What sacctmgr must add, and who has an association in the account without being
    listed."""

    add_cluster: bool = False
    add_account: bool = False
    add_users: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.add_cluster or self.add_account or bool(self.add_users)


def account_changes(
    clusters: Collection[str],
    accounts: Collection[str],
    associations: Sequence[Sequence[str]],
    *,
    cluster: str,
    account: str,
    users: Sequence[str],
) -> AccountChanges:
    """What to add so that each of USERS has an association in ACCOUNT on CLUSTER. associations:
    sacctmgr's (account, user) rows of the cluster (a user's empty row is the account's own)."""
    have = {user for acct, user in associations if acct == account and user}
    return AccountChanges(
        add_cluster=cluster not in clusters,
        add_account=account not in accounts,
        add_users=[user for user in dict.fromkeys(users) if user not in have],
        unlisted=sorted(have - set(users) - {"root"}),
    )


def sacctmgr_commands(changes: AccountChanges, *, cluster: str, account: str) -> list[list[str]]:
    """The sacctmgr command lines that make CHANGES, in order (the cluster, then the account,
    then each user); -i answers sacctmgr's question itself."""
    commands = []
    if changes.add_cluster:
        commands.append(["sacctmgr", "-i", "add", "cluster", cluster])
    if changes.add_account:
        commands.append(
            ["sacctmgr", "-i", "add", "account", account, f"cluster={cluster}",
             "description=the training cluster's people", "organization=torch-cluster"]
        )  # fmt: skip
    for user in changes.add_users:
        commands.append(
            ["sacctmgr", "-i", "add", "user", user, f"account={account}", f"cluster={cluster}",
             f"defaultaccount={account}"]
        )  # fmt: skip
    return commands
