"""The nodes of the sandbox scenario, and real TCP connections between them.

`Node.connect` opens a TCP connection from a node and reports how it ended; a `Listener`
(started by conftest's `listen` fixture) accepts connections on a node and sends each client
its token, so that a test can tell its own listener from anything else on the port.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from testinfra.host import Host

PROJECT_DIR = Path(__file__).resolve().parents[3]

# The port range gloo and NCCL pick their connections from (the kernel's ephemeral ports).
RANDOM_PORTS = range(40000, 60001)

# Listens on 0.0.0.0:PORT, tells systemd it is ready once it listens (the unit is
# Type=notify, so systemd-run returns only then), and sends TOKEN to every client.
LISTENER_SCRIPT = """
import os, socket, sys
port, token = int(sys.argv[1]), sys.argv[2].encode()
server = socket.create_server(("", port), backlog=16)
address = os.environ["NOTIFY_SOCKET"]
address = "\\0" + address[1:] if address.startswith("@") else address
with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
    notify.sendto(b"READY=1", address)
while True:
    client, _ = server.accept()
    with client:
        client.sendall(token)
"""

# Connects to ADDRESS:PORT and prints the outcome as JSON: "connected" and the first bytes
# the server sent, or the errno name of the failure (EHOSTUNREACH is "No route to host",
# what firewalld answers), or "timeout".
CLIENT_SCRIPT = """
import errno, json, socket, sys
address, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    with socket.create_connection((address, port), timeout=timeout) as connection:
        try:
            data = connection.recv(256)
        except TimeoutError:
            data = b""
    result = {"outcome": "connected", "data": data.decode(errors="replace")}
except TimeoutError:
    result = {"outcome": "timeout", "data": ""}
except OSError as error:
    result = {"outcome": errno.errorcode.get(error.errno, str(error)), "data": ""}
print(json.dumps(result))
"""


# Where Node.slow_answers puts its slow systemctl: before /usr/bin on SSH's search path.
SLOW_SHIM = "/usr/local/bin/systemctl"


@dataclass(frozen=True)
class Connection:
    """What a TCP connection attempt ended with."""

    outcome: str
    data: str = ""

    @property
    def connected(self) -> bool:
        return self.outcome == "connected"


@dataclass(frozen=True)
class Node:
    """A host of the scenario's inventory (equal and hashed by name)."""

    name: str
    host: Host = field(compare=False)
    hostvars: dict[str, Any] = field(compare=False)

    @property
    def address(self) -> str:
        """The address the other nodes reach this one on (the cluster role's default)."""
        return self.hostvars.get("cluster_address", self.hostvars["ansible_host"])

    def setting(self, name: str, role: str) -> Any:
        """The value of a role variable for this host: the inventory's, else the role default."""
        value = self.hostvars.get(name, role_defaults(role)[name])
        if "{{" in str(value):
            msg = f"{name} of {self.name} is a template ({value!r}); these tests read only literals"
            raise ValueError(msg)
        return value

    def answers(self) -> bool:
        """Whether the node runs a command over SSH now. testinfra raises RuntimeError when ssh
        itself fails (exit 255: the connection refused while sshd starts, for one), which here
        means only "not yet"."""
        try:
            return self.host.run("true").rc == 0
        except RuntimeError:
            return False

    @property
    def interface(self) -> str:
        """The interface that carries the node's address."""
        links = json.loads(self.host.check_output("ip -j -4 address show"))
        return next(
            link["ifname"]
            for link in links
            if any(entry["local"] == self.address for entry in link.get("addr_info", []))
        )

    def connect(self, address: str, port: int, timeout: float = 5) -> Connection:
        """Open a TCP connection from this node to ADDRESS:PORT."""
        result = self.host.check_output(
            shlex.join(["python3", "-c", CLIENT_SCRIPT, address, str(port), str(timeout)])
        )
        return Connection(**json.loads(result))

    @contextlib.contextmanager
    def unplugged(self) -> Iterator[None]:
        """Take the node off the network, as a pulled cable would, and plug it back in on exit.

        Its processes keep running; nobody reaches it over SSH meanwhile, so this goes through
        podman, into the container that has this node's name and address."""
        container = self._container()
        link = self._podman("exec", container, "ip", "-j", "-4", "addr", "show")
        device = next(
            entry["ifname"]
            for entry in json.loads(link)
            if any(a["local"] == self.address for a in entry.get("addr_info", []))
        )
        routes = json.loads(self._podman("exec", container, "ip", "-j", "-4", "route", "show"))
        self._podman("exec", container, "ip", "link", "set", device, "down")
        try:
            yield
        finally:
            self._podman("exec", container, "ip", "link", "set", device, "up")
            for route in routes:
                if "gateway" in route:
                    self._podman(
                        "exec", container, "ip", "route", "replace",
                        route["dst"], "via", route["gateway"], "dev", device,
                    )  # fmt: skip

    def inside(self, *argv: str) -> str:
        """A command's output, run in the node's container through podman: it works while the
        node is unplugged."""
        return self._podman("exec", self._container(), *argv)

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Stop the node's container at once (SIGKILL to everything in it, as a power loss
        would), and start it again on exit, at its address, booted and answering SSH."""
        container = self._container()
        facts = json.loads(self._podman("inspect", container))[0]
        network = next(iter(facts["NetworkSettings"]["Networks"]))
        self._podman("stop", "--time=0", container)
        try:
            yield
        finally:
            self._podman("start", container)
            # podman gives a started container the next free address: give it its own back.
            self._podman("network", "disconnect", network, container)
            self._podman("network", "connect", f"--ip={self.address}", network, container)
            # "running", or "degraded" (rc 1) when a unit failed at boot: booted either way.
            subprocess.run(
                ["podman", "exec", container, "systemctl", "is-system-running", "--wait"],
                capture_output=True, timeout=120, check=False,
            )  # fmt: skip
            deadline = time.monotonic() + 60
            while not self.answers():
                assert time.monotonic() < deadline, f"{self} does not answer after its restart"
                time.sleep(1)
            # It booted on that other address, where its network mounts failed (the shared
            # folder's server takes the training user's key only from the members' addresses,
            # from=): a server that reboots keeps its address, so mount them again now.
            subprocess.run(
                ["podman", "exec", container, "systemctl", "start", "remote-fs.target"],
                capture_output=True, timeout=120, check=False,
            )  # fmt: skip

    @contextlib.contextmanager
    def throttled(self, rate: str = "20mbit") -> Iterator[None]:
        """Shape everything the node sends to RATE (tc's token bucket on its interface), as a
        slow NIC or a bad link would, and undo it on exit."""
        container, device = self._container(), self.interface
        shaping = ["tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
        self._podman("exec", container, "tc", "qdisc", "add", "dev", device, "root", *shaping)
        try:
            yield
        finally:
            self._podman("exec", container, "tc", "qdisc", "del", "dev", device, "root")

    @contextlib.contextmanager
    def slow_answers(self, seconds: float) -> Iterator[None]:
        """Every command the node runs through SSH's search path (/usr/local/bin first) answers
        SECONDS late, as from a loaded node: the watch's polls of its unit (systemctl) take
        that much longer. Put in and taken out through podman, not through the slowed SSH."""
        container = self._container()
        shim = f'#!/bin/sh\nsleep {seconds}\nexec /usr/bin/systemctl "$@"\n'
        self._podman("exec", container, "sh", "-c",
                     f"printf '%s' '{shim}' > {SLOW_SHIM} && chmod 755 {SLOW_SHIM}")  # fmt: skip
        try:
            yield
        finally:
            self._podman("exec", container, "rm", "-f", SLOW_SHIM)

    @contextlib.contextmanager
    def mtu(self, size: int) -> Iterator[None]:
        """Set the MTU of the node's interface to SIZE, as a node configured apart from the
        rest would have it, and put the old one back on exit."""
        container, device = self._container(), self.interface
        old = self.host.check_output(f"cat /sys/class/net/{device}/mtu").strip()
        self._podman("exec", container, "ip", "link", "set", "dev", device, "mtu", str(size))
        try:
            yield
        finally:
            self._podman("exec", container, "ip", "link", "set", "dev", device, "mtu", old)

    def _container(self) -> str:
        names = self._podman("ps", "--format", "{{.Names}}").split()
        for name in names:
            facts = json.loads(self._podman("inspect", name))[0]
            networks = facts["NetworkSettings"]["Networks"].values()
            if facts["Config"]["Hostname"] == self.name and any(
                network["IPAddress"] == self.address for network in networks
            ):
                return name
        msg = f"no container of {names} is {self.name} at {self.address}"
        raise LookupError(msg)

    @staticmethod
    def _podman(*args: str) -> str:
        done = subprocess.run(
            ["podman", *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, f"podman {shlex.join(args)}: {done.stderr}"
        return done.stdout

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Listener:
    """A TCP listener on NODE:PORT that sends TOKEN to each client."""

    node: Node
    port: int
    token: str

    def connect_from(self, client: Node) -> Connection:
        return client.connect(self.node.address, self.port)

    @property
    def welcome(self) -> Connection:
        """What a client that reaches this listener sees."""
        return Connection("connected", self.token)


@functools.cache
def role_defaults(role: str) -> dict[str, Any]:
    return yaml.safe_load((PROJECT_DIR / "roles" / role / "defaults" / "main.yml").read_text())


# The type of conftest's `listen` fixture: listen(node, port=None) -> Listener.
Listen = Callable[..., Listener]
