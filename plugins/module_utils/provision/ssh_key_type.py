"""Which SSH key type a node's training user gets: ed25519, unless FIPS mode forbids it.

RHEL in FIPS mode refuses ed25519 keys (its OpenSSH allows only the FIPS 140 algorithms: ECDSA
on the NIST curves and RSA), so a FIPS node gets ECDSA P-256 by default. The choice can be
forced with ssh_trust_key_type.
"""

from __future__ import annotations

# type -> (ssh-keygen type, size in bits or None for the type's own, key file name)
KEY_TYPES = {
    "ed25519": ("ed25519", None, "id_ed25519"),
    "ecdsa": ("ecdsa", 256, "id_ecdsa"),
    "rsa": ("rsa", 3072, "id_rsa"),
}


FIPS_ALLOWED = ("ecdsa", "rsa")


CHOICES = ("auto", *KEY_TYPES)


def fips_enabled(text: str | None) -> bool:
    """The content of /proc/sys/crypto/fips_enabled ('1' in FIPS mode); None when absent."""
    return (text or "").strip() == "1"


def choose(setting: str, fips: bool) -> tuple[dict | None, str | None]:
    """(the key to use, None) or (None, why the setting cannot be used on this node)."""
    if setting not in CHOICES:
        return None, (
            f"ssh_trust_key_type is '{setting}'; expected one of {', '.join(CHOICES)} "
            "(auto: ed25519, or ecdsa on a node in FIPS mode)"
        )
    name = setting if setting != "auto" else ("ecdsa" if fips else "ed25519")
    if fips and name not in FIPS_ALLOWED:
        return None, (
            f"ssh_trust_key_type is {name}, but this node is in FIPS mode "
            "(/proc/sys/crypto/fips_enabled is 1), where OpenSSH refuses ed25519 keys. "
            "Use auto, ecdsa or rsa"
        )
    kind, size, filename = KEY_TYPES[name]
    return {"type": kind, "size": size, "file": filename, "fips": fips}, None
