"""The team's members as users of their own (training_user_team), beside the training user.

Each member is created on every node with one UID and one GID everywhere, as the training user
is (training_user.choose_ids decides for each), and can log in with the public keys the list
gives. The members are chosen one after another, after the training user, each seeing the ids
chosen before it as taken: two new members never get the same number.

Standard library only: runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.training_user import (
    ID_MAX,
    NAME,
    choose_ids,
)

# What a member of training_user_team may say.
MEMBER_FIELDS = ("name", "uid", "keys")

# The key types OpenSSH 8.7 (EL9) and 9.2 (Debian 12) accept in authorized_keys, and how many
# length-prefixed strings each key's blob holds (RFC 4253 6.6, RFC 5656 3.1, RFC 8709 4, and
# OpenSSH's PROTOCOL.u2f), its type name first.
KEY_TYPES = {
    "ssh-ed25519": 2,
    "ssh-rsa": 3,
    "ecdsa-sha2-nistp256": 3,
    "ecdsa-sha2-nistp384": 3,
    "ecdsa-sha2-nistp521": 3,
    "sk-ssh-ed25519@openssh.com": 3,
    "sk-ecdsa-sha2-nistp256@openssh.com": 4,
}


def _wire_strings(blob: bytes) -> list[bytes] | None:
    """The length-prefixed strings of a key's blob, or None where the blob is not made of them
    exactly (cut short, or with bytes left over)."""
    strings, at = [], 0
    while at < len(blob):
        if at + 4 > len(blob):
            return None
        length = int.from_bytes(blob[at : at + 4], "big")
        if at + 4 + length > len(blob):
            return None
        strings.append(blob[at + 4 : at + 4 + length])
        at += 4 + length
    return strings


def _key_problem(name: str, key: object) -> str | None:
    """Why KEY is not one public key line ("TYPE BASE64 [comment]"), or None."""
    if not isinstance(key, str) or "\n" in key.strip():
        return f"a key of {name} in training_user_team is not one line of text"
    fields = key.split()
    if len(fields) < 2 or fields[0] not in KEY_TYPES:
        return (
            f"a key of {name} in training_user_team is not a public key (TYPE BASE64 [comment], "
            f"TYPE one of {', '.join(KEY_TYPES)}): {key[:40]!r}"
        )
    try:
        blob = base64.b64decode(fields[1], validate=True)
    except (binascii.Error, ValueError):
        return f"a key of {name} in training_user_team has a key part that is not base64"
    # A key pasted under the wrong type, or cut short, is refused here: sshd would skip it
    # without a word, and its owner could not log in.
    strings = _wire_strings(blob)
    if strings is None or len(strings) != KEY_TYPES[fields[0]] or strings[0] != fields[0].encode():
        return f"a key of {name} in training_user_team is cut short or is not a {fields[0]} key"
    return None


def member_problems(members: Sequence[Any], training_user: str) -> list[str]:
    """One sentence per member of training_user_team the role cannot create as it is."""
    problems: list[str] = []
    seen: set[str] = set()
    for index, member in enumerate(members):
        if not isinstance(member, Mapping) or not isinstance(member.get("name"), str):
            problems.append(f"training_user_team[{index}] must be a mapping with a name")
            continue
        name = member["name"]
        unknown = sorted(set(member) - set(MEMBER_FIELDS))
        if unknown:
            problems.append(
                f"{name} in training_user_team has {', '.join(unknown)}, which the role does "
                f"not know (a member has {', '.join(MEMBER_FIELDS)})"
            )
        if not NAME.match(name):
            problems.append(
                f"{name!r} in training_user_team is not a portable user name: a lower case "
                "letter or _, then lower case letters, digits, _ or -, 32 characters at most "
                "(useradd(8))"
            )
        elif name in ("root", training_user):
            problems.append(
                f"{name} in training_user_team is "
                f"{'root' if name == 'root' else 'the training user'}: the list holds the "
                "team's people, each a user of their own"
            )
        elif name in seen:
            problems.append(f"training_user_team names {name} twice")
        seen.add(name)
        uid = member.get("uid", 0)
        if not isinstance(uid, int) or isinstance(uid, bool) or not 0 <= uid <= ID_MAX:
            problems.append(
                f"the uid of {name} in training_user_team must be 0 (chosen) or 1 to {ID_MAX}, "
                f"got {uid!r}"
            )
        keys = member.get("keys", [])
        if not isinstance(keys, list):
            problems.append(f"the keys of {name} in training_user_team must be a list")
            continue
        problems += [p for p in (_key_problem(name, key) for key in keys) if p]
    return problems


def _with_user(probe: Mapping, name: str, uid: int, gid: int) -> dict:
    """A node's probe in which NAME has UID and a group of its name GID (chosen, not yet made)."""
    return {
        **probe,
        "users": {**probe["users"], name: [uid, gid]},
        "groups": {**probe["groups"], name: gid},
    }


def choose_member_ids(
    members: Sequence[Mapping[str, Any]],
    probes: Mapping[str, Mapping],
    taken: Mapping[str, tuple[int, int]],
    *,
    id_min: int,
) -> tuple[dict[str, dict], list[str]]:
    """({name: choose_ids' choice}, problems) for the members, in the list's order. probes: each
    node's training_user_ids result, whose `members` holds each member's own entry there
    (node_ids' user and group); taken: name -> (uid, gid) chosen already (the training user's),
    which no member may get where it is not made yet."""
    silent = [node for node, probe in probes.items() if "members" not in probe]
    if silent:
        return {}, [f"no users and groups were read from {', '.join(silent)}"]
    base = dict(probes)
    for name, (uid, gid) in taken.items():
        base = {node: _with_user(probe, name, uid, gid) for node, probe in base.items()}
    chosen: dict[str, dict] = {}
    problems: list[str] = []
    for member in members:
        name = member["name"]
        own = {node: {**probe, **probe["members"][name]} for node, probe in base.items()}
        labels = {"UID": f"{name}'s uid in training_user_team", "GID": f"{name}'s group id"}
        choice, why_not = choose_ids(
            name, own, uid=int(member.get("uid", 0)), id_min=id_min, labels=labels
        )
        if choice is None:
            problems += why_not
            continue
        chosen[name] = choice
        base = {
            node: _with_user(probe, name, choice["uid"], choice["gid"])
            for node, probe in base.items()
        }
    return chosen, problems
