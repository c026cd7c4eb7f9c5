"""The cluster's unprivileged training user: one UID and one GID on every node.

A file written on one node must be read and replaced on another (shared storage, Slurm, a
checkpoint copied between nodes), so the user has the same UID and primary GID everywhere, and
its primary group has its name. The training_user_ids module reads each node's users and groups
(node_ids); the training_user_choice action plugin then decides once for the whole cluster,
before anything changes, with choose_ids():

- where the user or its group exists already, its ids are kept (changing a UID or GID leaves
  every file it owns to a number nobody has), so the nodes that have them must agree, and the
  nodes that lack them must have those numbers free;
- where neither exists anywhere, the lowest number from training_user_id_min on that is free
  both as a UID and as a GID on every node (the same number for both);
- ids that the inventory sets are checked against both.

Standard library only: runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

# useradd(8): "begin with a lower case letter or an underscore, followed by lower case letters,
# digits, underscores, or dashes", at most 32 characters. The portable subset of what Debian's
# and RHEL's shadow-utils accept.
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


# login.defs' UID_MAX and GID_MAX: the top of the regular users' range, where the choice stops.
ID_MAX = 60000


# nobody and nogroup; 2**32 - 1 is (uid_t) -1, "no change" to chown(2).
RESERVED_IDS = (65534, 2**32 - 1)


WORLD_RW = stat.S_IROTH | stat.S_IWOTH


# The settings that set the training user's ids, as the refusals name them.
SETTINGS = {"UID": "training_user_uid", "GID": "training_user_gid"}


def input_problems(
    name: str, *, home: str, shell: str, uid: int, gid: int, id_min: int
) -> list[str]:
    """One sentence per input the role cannot use."""
    problems = []
    if not NAME.match(name):
        problems.append(
            f"training_user_name {name!r} is not a portable user name: a lower case letter or "
            "_, then lower case letters, digits, _ or -, 32 characters at most (useradd(8))"
        )
    if home and not _clean_absolute(home):
        problems.append(
            "training_user_home must be empty (/home/<name>) or an absolute path other than /, "
            f"without . or .. or ':' (got {home!r})"
        )
    if not _clean_absolute(shell):
        problems.append(f"training_user_shell must be an absolute path (got {shell!r})")
    for var, value in (("training_user_uid", uid), ("training_user_gid", gid)):
        if value < 0 or value >= 2**32 or value in RESERVED_IDS:
            problems.append(
                f"{var} must be 0 (chosen) or a number from 1 to {2**32 - 2} other than "
                f"{RESERVED_IDS[0]} (nobody), got {value}"
            )
    if not 1000 <= id_min <= ID_MAX:
        problems.append(
            f"training_user_id_min must be within the regular users' range, 1000 to {ID_MAX} "
            f"(login.defs UID_MIN to UID_MAX), got {id_min}"
        )
    return problems


def _clean_absolute(path: str) -> bool:
    return (
        path.startswith("/")
        and path.strip("/") != ""
        and ":" not in path
        and "\n" not in path
        and not any(part in (".", "..") for part in path.split("/"))
    )


def _entries(text: str, width: int, entry: Callable[[list[str]], T]) -> list[T]:
    """Each line of a colon-separated database (/etc/passwd, /etc/group) that has its `width`
    fields, as `entry` reads them; without comments, NIS lines or broken lines (a number that
    is not one)."""
    entries = []
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) != width or line.startswith(("#", "+", "-")):
            continue
        try:
            entries.append(entry(fields))
        except ValueError:
            continue
    return entries


def parse_passwd(text: str) -> list[tuple[str, int, int, str]]:
    """/etc/passwd as (name, uid, gid, home), without comments, NIS lines or broken lines."""
    return _entries(text, 7, lambda fields: (fields[0], int(fields[2]), int(fields[3]), fields[5]))


def parse_group(text: str) -> list[tuple[str, int]]:
    """/etc/group as (name, gid)."""
    return _entries(text, 4, lambda fields: (fields[0], int(fields[2])))


def node_ids(
    name: str,
    users: Iterable[tuple[str, int, int, str]],
    groups: Iterable[tuple[str, int]],
    local_users: Collection[str],
) -> dict:
    """What a node tells the choice: its entry for the user (None where it has none), the GID
    of the group with the user's name (None where none), and every user (name -> [uid,
    primary gid]) and group (name -> gid) it knows. local_users: the names in /etc/passwd; a
    user found only elsewhere (LDAP, SSSD) is not local."""
    user_ids: dict[str, list[int]] = {}
    homes: dict[str, str] = {}
    for user_name, uid, gid, home in users:
        user_ids.setdefault(user_name, [uid, gid])
        homes.setdefault(user_name, home)
    group_ids: dict[str, int] = {}
    for group_name, gid in groups:
        group_ids.setdefault(group_name, gid)
    user = None
    if name in user_ids:
        uid, gid = user_ids[name]
        owners = sorted(g for g, n in group_ids.items() if n == gid)
        user = {
            "uid": uid,
            "gid": gid,
            "home": homes[name],
            # The primary group's name: its own where a group with that GID has its name.
            "group": name if name in owners else (owners[0] if owners else ""),
            "local": name in local_users,
        }
    return {"user": user, "group": group_ids.get(name), "users": user_ids, "groups": group_ids}


def _renumber_hint(name: str) -> str:
    return (
        f"The role never changes the ids of an existing user or group: every file that {name} "
        "owns (in its home, on shared storage) would be left to a number nobody has. Change "
        f"them by hand where they are wrong (usermod -u UID {name}; groupmod -g GID {name}; "
        "then find / -xdev -uid OLD_UID -exec chown -h UID {} +, and -gid for the group), or "
        f"remove them there (userdel {name}; groupdel {name}) if they own nothing, then run again"
    )


def _owners(probe: Mapping, name: str) -> tuple[dict[int, str], dict[int, str]]:
    """What other than the user and its group has each UID and GID on a node. A GID is also
    taken by a user whose primary GID it is without a group entry: the new group would become
    that user's."""
    uids: dict[int, str] = {}
    gids: dict[int, str] = {}
    for group, gid in sorted(probe["groups"].items()):
        if group != name:
            gids.setdefault(gid, f"the group {group}")
    grouped = set(probe["groups"].values())
    for user, (uid, gid) in sorted(probe["users"].items()):
        if user != name:
            uids.setdefault(uid, f"the user {user}")
            if gid not in grouped:
                gids.setdefault(gid, f"the user {user} (its primary GID, without a group entry)")
    return uids, gids


def _free(taken: Collection[int], id_min: int, prefer: int | None = None) -> int | None:
    """prefer, where it is id_min or more and free; else the lowest free number from id_min
    (None when there is none up to ID_MAX)."""
    unusable = {*taken, *RESERVED_IDS}
    if prefer is not None and prefer >= id_min and prefer not in unusable:
        return prefer
    return next((n for n in range(id_min, ID_MAX + 1) if n not in unusable), None)


def _existing_problems(name: str, probes: Mapping[str, Mapping]) -> list[str]:
    """Why the user and its group, where they exist already, cannot be kept as they are."""
    problems = []
    directory = [n for n, p in probes.items() if p["user"] and not p["user"]["local"]]
    if directory:
        problems.append(
            f"{name} on {', '.join(directory)} comes from a directory service (LDAP, SSSD), not "
            f"/etc/passwd: its ids are the directory's, and useradd would make a second, local "
            f"{name}. Use it as it is with training_user_enabled: false, or choose another "
            "training_user_name (ssh_trust_user)"
        )
    for node, probe in probes.items():
        user = probe["user"]
        own_group = probe["group"]
        if user and (user["group"] not in ("", name) or own_group not in (None, user["gid"])):
            group = f"the group {user['group']}" if user["group"] else "a GID without a group"
            also = f", and the group {name} has GID {own_group}" if own_group is not None else ""
            problems.append(
                f"on {node}, {name}'s primary group is {group} (GID {user['gid']}){also}: the "
                f"user's primary group must be the group {name}. Make it so by hand "
                f"(usermod -g {name} {name}, after groupadd {name} if needed), or remove the user "
                "there if it owns nothing, then run again"
            )
    for kind, ids in (("UID", _ids(probes, "uid")), ("GID", _ids(probes, "gid"))):
        if len(set(ids.values())) > 1:
            lack = [n for n in probes if n not in ids]
            problems.append(
                f"{name} has different {kind}s on the nodes: "
                f"{', '.join(f'{n} {i}' for n, i in ids.items())}"
                f"{'; none on ' + ', '.join(lack) if lack else ''}. Every node needs the "
                f"same {kind} (files on shared storage, Slurm). {_renumber_hint(name)}"
            )
    return problems


def _ids(probes: Mapping[str, Mapping], kind: str) -> dict[str, int]:
    """The user's uid, or its group's gid, by node, where they exist: the user's primary GID,
    or the GID of the group with its name where the user does not exist."""
    ids = {}
    for node, probe in probes.items():
        if probe["user"]:
            ids[node] = probe["user"][kind]
        elif kind == "gid" and probe["group"] is not None:
            ids[node] = probe["group"]
    return ids


def _setting_problems(
    name: str, kind: str, var: str, wanted: int, existing: Mapping[str, int]
) -> list[str]:
    """An id that the inventory sets (VAR), against the one the user or group has already."""
    have = sorted(set(existing.values()))
    if not wanted or len(have) != 1 or have == [wanted]:
        return []
    return [
        f"{var} is {wanted}, but {name} has {kind} {have[0]} on "
        f"{', '.join(n for n, i in existing.items() if i == have[0])}. Set {var}: {have[0]} (or "
        f"0) to keep it. {_renumber_hint(name)}"
    ]


def _choose(
    uid: int | None, gid: int | None, owners: Mapping, id_min: int
) -> tuple[int | None, int | None]:
    """The ids not fixed already: the same number for both where neither is; else the one
    not fixed takes the other's number where that is free, or the lowest free one."""
    taken_uids = {n for uids, _ in owners.values() for n in uids}
    taken_gids = {n for _, gids in owners.values() for n in gids}
    if uid is None and gid is None:
        uid = gid = _free(taken_uids | taken_gids, id_min)
    elif uid is None:
        uid = _free(taken_uids, id_min, prefer=gid)
    elif gid is None:
        gid = _free(taken_gids, id_min, prefer=uid)
    return uid, gid


def _origin(kind: str, wanted: int, existing: Mapping[str, int], labels: Mapping[str, str]) -> str:
    """Where an id comes from, for a refusal."""
    if wanted:
        return labels[kind]
    if existing:
        return f"its {kind} on {', '.join(existing)}"
    return "chosen"


def _taken_problems(
    name: str,
    ids: Mapping[str, tuple[int, int, Mapping[str, int]]],
    owners: Mapping,
    labels: Mapping[str, str],
) -> list[str]:
    """A chosen or set id that something else has on a node."""
    problems = []
    for node, (uids, gids) in owners.items():
        for kind, (number, wanted, existing) in ids.items():
            taker = (uids if kind == "UID" else gids).get(number)
            if not taker:
                continue
            fix = (
                f"Set {labels[kind]} to another number, or to 0 to let the role choose one free on "
                "every node"
                if wanted
                else f"{name} needs the same {kind} on every node: give {taker} another "
                f"number on {node}, or change {name}'s where it exists. {_renumber_hint(name)}"
            )
            origin = _origin(kind, wanted, existing, labels)
            problems.append(f"{kind} {number} ({origin}) is taken on {node} by {taker}. {fix}")
    return problems


def choose_ids(
    name: str,
    probes: Mapping[str, Mapping],
    *,
    uid: int = 0,
    gid: int = 0,
    id_min: int = 2000,
    home: str = "",
    labels: Mapping[str, str] = SETTINGS,
) -> tuple[dict | None, list[str]]:
    """({uid, gid, homes: node -> home, create: the nodes without the user}, []) or (None,
    why not), from every node's node_ids(), in the nodes' order. uid, gid: the inventory's, 0
    to choose; home: the inventory's, "" for /home/<name> where the user is created (a node
    where it exists keeps its home). labels: the settings' names in the refusals (SETTINGS)."""
    silent = [node for node, probe in probes.items() if "users" not in probe]
    if silent:
        return None, [f"no users and groups were read from {', '.join(silent)}"]
    problems = _existing_problems(name, probes)
    existing_uids, existing_gids = _ids(probes, "uid"), _ids(probes, "gid")
    problems += _setting_problems(name, "UID", labels["UID"], uid, existing_uids)
    problems += _setting_problems(name, "GID", labels["GID"], gid, existing_gids)
    if problems:
        return None, problems

    owners = {node: _owners(probe, name) for node, probe in probes.items()}
    chosen_uid, chosen_gid = _choose(
        uid or next(iter(existing_uids.values()), None),
        gid or next(iter(existing_gids.values()), None),
        owners,
        id_min,
    )
    if chosen_uid is None or chosen_gid is None:
        return None, [
            f"no number from training_user_id_min ({id_min}) to {ID_MAX} is free as a UID "
            f"and a GID on every node for {name}: set {labels['UID']} and {labels['GID']}"
        ]
    problems = _taken_problems(
        name,
        {"UID": (chosen_uid, uid, existing_uids), "GID": (chosen_gid, gid, existing_gids)},
        owners,
        labels,
    )

    homes = {}
    for node, probe in probes.items():
        user = probe["user"]
        homes[node] = home or (user["home"] if user else f"/home/{name}")
        if user and home and user["home"] != home:
            problems.append(
                f"training_user_home is {home}, but {name}'s home on {node} is {user['home']}: "
                f"the role does not move homes. Move it there (usermod -m -d {home} {name}) or "
                "leave training_user_home empty to keep each node's"
            )
    if problems:
        return None, problems
    create = [node for node, probe in probes.items() if not probe["user"]]
    return {"uid": chosen_uid, "gid": chosen_gid, "homes": homes, "create": create}, []


def gpu_access(
    name: str, wanted: Sequence[str], groups: Collection[str], devices: Sequence[Mapping]
) -> dict:
    """The GPU groups the user joins on a node (those of wanted that exist there, in wanted's
    order), those skipped, and a note per device group whose devices the user could not open.
    devices: [{path, group, mode}] of /dev/nvidia* and /dev/dri/* (mode in octal, "0660")."""
    present = [g for g in wanted if g in groups]
    missing = [g for g in wanted if g not in groups]
    notes = []
    if missing:
        notes.append(f"no group {', '.join(missing)} on this node: {name} is not added to it")
    member = {*present, name}
    closed: dict[str, list[str]] = {}
    for device in devices:
        if int(device["mode"], 8) & WORLD_RW != WORLD_RW and device["group"] not in member:
            closed.setdefault(device["group"], []).append(device["path"])
    for group, paths in sorted(closed.items()):
        notes.append(
            f"{name} cannot open {', '.join(paths)} (group {group}, not readable and writable "
            f"by all): add {group} to training_user_gpu_groups"
        )
    return {"gpu_groups": present, "gpu_groups_missing": missing, "notes": notes}
