"""Podman as the container tests drive it: the registry's image built from deploy/Containerfile
on a base made from Debian's packages, and registry containers on a network of their own.

What a machine like CI's needs (root, cgroup v1 controllers beside v2, no systemd, open-file
limits capped, no image registry, PyPI reached only through the host's pip configuration) is
written down here: CONTAINERS_CONF, passed to every podman command through the
CONTAINERS_CONF variable (nothing in /etc is changed), and the wheelhouse made on the host.

Without podman, or where it cannot build the base or run a container, the tests skip and say
why; where REQUIRE_CONTAINER_TESTS is set (`.ci/run` sets it) they fail instead.

Left behind on purpose: the base image, `localhost/registry-base:bookworm-HASH` (HASH: of the
script that makes it), built once in about a minute and reused. Everything else the tests make,
the project's image included, is removed when they end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NoReturn

import pytest

from tests.helpers import free_port

REQUIRED = "REQUIRE_CONTAINER_TESTS"
ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
BASE_SCRIPT = ROOT / "deploy" / "base" / "build-debian-base.sh"
PACKAGES = "podman runc netavark aardvark-dns iptables debootstrap"
LABEL = "service-registry.test"  # on everything the tests make, to find leftovers by hand
COMMAND_TIMEOUT = 60.0  # one podman command that is not a build
BUILD_TIMEOUT = 600.0  # the base (debootstrap and upgrades: about a minute), or the image

CONTAINERS_CONF = """\
[containers]
# podman asks for 1048576 open files by default, above this machine's hard limit, and runc then
# refuses to start any container ("error setting rlimit type 7: operation not permitted"):
# containers keep the limits podman has.
default_ulimits = []
# No journald: logs in files, which `podman logs` reads.
log_driver = "k8s-file"

[engine]
# cgroups here are hybrid (v1 controllers, v2 beside them) and no systemd runs: crun refuses
# that ("cgroups in hybrid mode not supported"), the systemd cgroup manager has no systemd to
# ask, so runc, with podman writing the cgroups itself.
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
# netavark's networks have a DNS server (aardvark-dns) that answers a network alias with the
# address of every container that carries it.
network_backend = "netavark"
"""


def unavailable(why: str) -> NoReturn:
    """Skip the test, or fail it where REQUIRE_CONTAINER_TESTS is set."""
    if os.environ.get(REQUIRED):
        pytest.fail(f"{REQUIRED} is set, but {why}")
    pytest.skip(why)


@contextlib.contextmanager
def timed(what: str) -> Iterator[None]:
    """Print how long `what` took (pytest shows it with -s, or when the test fails)."""
    started = time.monotonic()
    yield
    print(f"container test: {what}: {time.monotonic() - started:.1f} s")


class PodmanFailed(Exception):
    pass


class Podman:
    """The podman command with this module's configuration, written into `directory`."""

    def __init__(self, directory: Path) -> None:
        conf = directory / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        self.env = os.environ | {"CONTAINERS_CONF": str(conf)}

    def run(
        self, *args: str, timeout: float = COMMAND_TIMEOUT, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`podman ARGS` to its end (blocking); PodmanFailed, with its output, when it fails and
        `check`."""
        done = subprocess.run(
            ["podman", *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise PodmanFailed(
                f"podman {' '.join(args)}: exit {done.returncode}\n"
                f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return done

    async def arun(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> str:
        """`run` off the event loop; its standard output."""
        return (await asyncio.to_thread(self.run, *args, timeout=timeout)).stdout


def find_podman(directory: Path) -> Podman:
    if shutil.which("podman") is None:
        unavailable(f"podman is not installed (apt-get install {PACKAGES})")
    return Podman(directory)


def base_image(podman: Podman) -> str:
    """The base image's name: built by deploy/base/build-debian-base.sh unless podman has it
    already, and tried: a container from it must run, with this interpreter's Python (the
    wheelhouse is made by it)."""
    digest = hashlib.sha256(BASE_SCRIPT.read_bytes()).hexdigest()[:12]
    name = f"localhost/registry-base:bookworm-{digest}"
    if podman.run("image", "exists", name, check=False).returncode != 0:
        if shutil.which("debootstrap") is None:
            unavailable(f"debootstrap is not installed (apt-get install {PACKAGES})")
        if os.geteuid() != 0:
            unavailable("building the base image needs root (debootstrap)")
        with timed("base image built"):
            built = subprocess.run(
                ["sh", str(BASE_SCRIPT), name],
                env=podman.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT,
            )
        if built.returncode != 0:
            unavailable(f"the base image could not be built:\n{built.stderr[-3000:]}")
    trial = podman.run(
        "run", "--rm", name, "python3", "-c", "import sys; print(*sys.version_info[:2])",
        check=False,
    )  # fmt: skip
    if trial.returncode != 0:
        unavailable(f"podman cannot run a container here:\n{trial.stderr[-3000:]}")
    if trial.stdout.split() != [str(n) for n in sys.version_info[:2]]:
        unavailable(
            f"the base has Python {trial.stdout.strip()}, the tests {sys.version_info[:2]}: "
            "the wheelhouse made here would not fit it"
        )
    return name


def wheelhouse(directory: Path) -> Path:
    """Wheels of everything the image installs (the build backend, the dependencies and the
    `fast` extra), made by this interpreter's pip: it reaches PyPI through the host's
    configuration, which a build's containers do not have."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requirements = [
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["fast"],
    ]
    wheels = directory / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels)]
    made = subprocess.run(
        [*pip_wheel, *requirements],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    if made.returncode != 0:
        unavailable(f"`pip wheel` could not make the wheelhouse:\n{made.stderr[-3000:]}")
    return wheels


def build_image(podman: Podman, base: str, wheels: Path) -> str:
    """The project's image, built from deploy/Containerfile: its name (a new one each run;
    without a layer cache, as the sources change between runs anyway)."""
    name = f"localhost/service-registry:test-{uuid.uuid4().hex[:8]}"
    podman.run(
        "build", "--layers=false", "--file", str(CONTAINERFILE), "--label", LABEL,
        "--build-arg", f"BASE={base}", "--build-context", f"wheels={wheels}",
        "--tag", name, str(ROOT),
        timeout=BUILD_TIMEOUT,
    )  # fmt: skip
    return name


class Node:
    """A registry container: its name, its data volume, its API published on a loopback port."""

    def __init__(self, podman: Podman, name: str, args: list[str]) -> None:
        self.podman = podman
        self.name = name
        self.volume = f"{name}-data"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._args = args

    async def start(self) -> None:
        """Create and start it (`podman run -d`); returns before it serves."""
        await self.podman.arun(
            "run", "--detach", "--name", self.name, "--label", LABEL,
            "--publish", f"127.0.0.1:{self.port}:8761", "--volume", f"{self.volume}:/data",
            # As deploy/kubernetes/statefulset.yaml runs it: a read-only root (podman mounts
            # /tmp as tmpfs), no capabilities, no privilege to gain.
            "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges",
            *self._args,
        )  # fmt: skip

    async def kill(self) -> None:
        """SIGKILL: no drain, no goodbye to the peers; its volume stays."""
        await self.podman.arun("kill", self.name)

    async def start_again(self) -> None:
        """`podman start`: the same container, volume and port."""
        await self.podman.arun("start", self.name)

    async def address(self, network: str) -> str:
        """Its address on `network` now (a restart may give it another)."""
        template = f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}'
        return (await self.podman.arun("inspect", "--format", template, self.name)).strip()

    async def exec(self, *command: str) -> str:
        """`command` run in it as its own user; its output."""
        return await self.podman.arun("exec", self.name, *command)

    def logs(self) -> str:
        done = self.podman.run("logs", "--tail", "40", self.name, check=False)
        return f"--- {self.name} ---\n{done.stdout}{done.stderr}"


class Containers:
    """The containers one test makes, on a network of its own: all removed when it ends, with
    their volumes and the network, after their logs are printed."""

    def __init__(self, podman: Podman, image: str) -> None:
        self.podman = podman
        self.image = image
        self.prefix = f"registry-test-{uuid.uuid4().hex[:8]}"
        self.network = self.prefix
        self.nodes: list[Node] = []
        podman.run("network", "create", "--label", LABEL, self.network)

    def node(self, settings: Mapping[str, object], *, aliases: tuple[str, ...] = ()) -> Node:
        """A container of the image, not started, on the network with `aliases`, with
        `settings` (named `section__key`) as REGISTRY_<SECTION>__<KEY> variables."""
        args = ["--network", self.network]
        args += [f"--network-alias={alias}" for alias in aliases]
        for key, value in settings.items():
            args += ["--env", f"REGISTRY_{key.upper()}={value}"]
        node = Node(self.podman, f"{self.prefix}-{len(self.nodes) + 1}", [*args, self.image])
        self.nodes.append(node)
        return node

    def remove_all(self) -> None:
        """Blocking; for a fixture's teardown."""
        for node in self.nodes:
            print(node.logs())
        names = [node.name for node in self.nodes]
        if names:
            self.podman.run("rm", "--force", "--time", "0", "--volumes", *names, check=False)
            volumes = [node.volume for node in self.nodes]
            self.podman.run("volume", "rm", "--force", *volumes, check=False)
        self.podman.run("network", "rm", "--force", self.network, check=False)
