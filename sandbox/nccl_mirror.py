"""A local mirror of NVIDIA's CUDA apt repository, for the nccl role in the sandbox.

The sandbox reaches no NVIDIA repository, so the nccl role's Debian path (cuda-keyring, the
signed apt source, the build that matches torch's NCCL, the hold, the checks of the library and
the header) would never run. This builds what such a mirror serves, laid out as NVIDIA's
debian12/x86_64 tree is (a flat, signed repository): libnccl2 and libnccl-dev at
<nccl>-1+cuda<X.Y>, made from the real NCCL that the nvidia-nccl-cu13 wheel ships (the library
and its headers), and a cuda-keyring package that installs the mirror's own signing key.

    python sandbox/nccl_mirror.py --wheel .cache/wheelhouse/nvidia_nccl_cu13-*.whl \
        --cuda 13.0 --out .cache/nccl-mirror
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from email.utils import formatdate
from pathlib import Path

LIBDIR = "usr/lib/x86_64-linux-gnu"
MAINTAINER = "torch-cluster sandbox <sandbox@torch-cluster.invalid>"


def build_deb(root: Path, control: dict[str, str], out: Path) -> Path:
    (root / "DEBIAN").mkdir(parents=True, exist_ok=True)
    text = "".join(f"{key}: {value}\n" for key, value in control.items())
    (root / "DEBIAN" / "control").write_text(text)
    name = f"{control['Package']}_{control['Version']}_{control['Architecture']}.deb"
    # gzip level 1: the library is some 240 MB, and xz would take minutes.
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", root, out / name],
        check=True,
        capture_output=True,
    )
    return out / name


def packages_entry(deb: Path, control: dict[str, str]) -> str:
    data = deb.read_bytes()
    fields = dict(control)
    fields |= {
        "Filename": f"./{deb.name}",
        "Size": str(len(data)),
        "SHA256": hashlib.sha256(data).hexdigest(),
    }
    return "".join(f"{key}: {value}\n" for key, value in fields.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--cuda", default="13.0")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    nccl = args.wheel.name.split("-")[1]
    version = f"{nccl}-1+cuda{args.cuda}"
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        with zipfile.ZipFile(args.wheel) as wheel:
            wheel.extractall(work / "wheel")
        source = work / "wheel" / "nvidia" / "nccl"

        # The mirror's signing key, in a keyring of its own.
        gnupg = work / "gnupg"
        gnupg.mkdir(mode=0o700)
        env = os.environ | {"GNUPGHOME": str(gnupg)}
        gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        subprocess.run(
            [
                *gpg,
                "--quick-gen-key",
                "torch-cluster sandbox CUDA mirror",
                "rsa3072",
                "sign",
                "never",
            ],
            check=True,
            env=env,
            capture_output=True,
        )
        keyring = subprocess.run(
            [*gpg, "--export"], check=True, env=env, capture_output=True
        ).stdout

        entries = []
        lib = work / "libnccl2"
        (lib / LIBDIR).mkdir(parents=True)
        shutil.copy2(source / "lib" / "libnccl.so.2", lib / LIBDIR / f"libnccl.so.{nccl}")
        os.symlink(f"libnccl.so.{nccl}", lib / LIBDIR / "libnccl.so.2")
        control = {
            "Package": "libnccl2",
            "Version": version,
            "Architecture": "amd64",
            "Maintainer": MAINTAINER,
            "Section": "libs",
            "Priority": "optional",
            "Description": f"NVIDIA Collective Communication Library {nccl}, CUDA {args.cuda}",
        }
        entries.append(packages_entry(build_deb(lib, control, args.out), control))

        dev = work / "libnccl-dev"
        shutil.copytree(source / "include", dev / "usr" / "include")
        (dev / LIBDIR).mkdir(parents=True)
        os.symlink("libnccl.so.2", dev / LIBDIR / "libnccl.so")
        control = {
            "Package": "libnccl-dev",
            "Version": version,
            "Architecture": "amd64",
            "Maintainer": MAINTAINER,
            "Section": "libdevel",
            "Priority": "optional",
            "Depends": f"libnccl2 (= {version})",
            "Description": f"NCCL {nccl} development files, CUDA {args.cuda}",
        }
        entries.append(packages_entry(build_deb(dev, control, args.out), control))

        key = work / "cuda-keyring"
        (key / "usr" / "share" / "keyrings").mkdir(parents=True)
        (key / "usr" / "share" / "keyrings" / "cuda-archive-keyring.gpg").write_bytes(keyring)
        control = {
            "Package": "cuda-keyring",
            "Version": "1.1-1",
            "Architecture": "all",
            "Maintainer": MAINTAINER,
            "Section": "misc",
            "Priority": "optional",
            "Description": "The sandbox CUDA mirror's signing key",
        }
        entries.append(packages_entry(build_deb(key, control, args.out), control))

        packages = "\n".join(entries).encode()
        (args.out / "Packages").write_bytes(packages)
        (args.out / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
        sums = "".join(
            f" {hashlib.sha256((args.out / name).read_bytes()).hexdigest()} "
            f"{(args.out / name).stat().st_size} {name}\n"
            for name in ("Packages", "Packages.gz")
        )
        release = (
            "Origin: torch-cluster sandbox\nLabel: CUDA mirror\nArchitectures: amd64 all\n"
            f"Date: {formatdate(usegmt=True)}\nSHA256:\n{sums}"
        )
        (args.out / "Release").write_text(release)
        for flag, name in (("--clearsign", "InRelease"), ("--detach-sign", "Release.gpg")):
            subprocess.run(
                [*gpg, "--armor", flag, "--output", args.out / name, args.out / "Release"],
                check=True,
                env=env,
                capture_output=True,
            )
    print(f"{args.out}: libnccl2 and libnccl-dev {version}, cuda-keyring 1.1-1")


if __name__ == "__main__":
    main()
