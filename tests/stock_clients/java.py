"""The suite's Java parts: a JDK and Maven found, a Maven project built once per run, and a
Java service run as a real process and driven over its own small HTTP API.

Tests that need them carry the `java` marker. Without a JDK 17 or newer, or without Maven,
they skip and say which is missing; where REQUIRE_JAVA_TESTS is set (`.ci/run` sets it), a
missing one fails them instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.helpers import free_port

REQUIRED = "REQUIRE_JAVA_TESTS"
START_TIMEOUT = 90.0  # a JVM and a Spring context on a busy 2-core machine
STOP_TIMEOUT = 30.0
BUILD_TIMEOUT = 900.0  # the first build downloads the release train from Maven Central
# A test JVM: quick to start, small.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m", "-Xss512k")


@functools.cache
def missing() -> str | None:
    """Why the Java tests cannot run here, or None."""
    java, mvn = shutil.which("java"), shutil.which("mvn")
    if java is None or mvn is None:
        return f"needs a JDK 17+ and Maven on PATH: {'java' if java is None else 'mvn'} not found"
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    found = re.search(r'version "(\d+)', version)
    if found is None or int(found.group(1)) < 17:
        return f"needs a JDK 17+: `java -version` says {version.strip()[:80]!r}"
    return None


def need_java() -> None:
    """Skip (or, where REQUIRE_JAVA_TESTS is set, fail) a test when Java cannot run here."""
    why = missing()
    if why is not None:
        if os.environ.get(REQUIRED):
            pytest.fail(f"{REQUIRED} is set, but this machine {why}")
        pytest.skip(why)


def build(project: Path, *profiles: str) -> None:
    """`mvn package` of `project` with `profiles`, offline first (a warmed local repository
    needs no network). Blocking: call it from a session fixture, outside any event loop."""
    command = ["mvn", "-B", "-q", "-f", str(project / "pom.xml"), "package", "-DskipTests"]
    command += [f"-P{profile}" for profile in profiles]
    offline = subprocess.run([*command, "-o"], capture_output=True, text=True)
    if offline.returncode != 0:
        online = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if online.returncode != 0:
            raise AssertionError(f"mvn failed:\n{online.stdout[-3000:]}{online.stderr[-3000:]}")


class JavaService:
    """A jar run with `java -jar`, its log in a file, on a loopback `port` chosen here (the
    caller puts it in `jvm_args` or `args`); ready when GET `ready_path` on that port answers,
    stopped with SIGTERM (the client's shutdown cancels its registration)."""

    def __init__(self, jar: Path, log: Path, *, ready_path: str = "/state") -> None:
        self.jar = jar
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._ready_path = ready_path
        self._process: subprocess.Popen[bytes] | None = None

    async def start(self, jvm_args: Sequence[str] = (), args: Sequence[str] = ()) -> None:
        command = ["java", *JVM_OPTIONS, *jvm_args, "-jar", str(self.jar), *args]
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT
        async with aiohttp.ClientSession() as session:
            while True:
                if self._process.poll() is not None:
                    raise AssertionError(f"the service exited at start:\n{self.tail()}")
                try:
                    async with session.get(self.base + self._ready_path) as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError(f"not ready in {START_TIMEOUT} s:\n{self.tail()}")
                await asyncio.sleep(0.2)

    async def call(self, method: str, path: str) -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.base + path) as response,
        ):
            assert 200 == response.status, await response.text()
            return await response.json()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    async def stop(self) -> int:
        """SIGTERM, and its exit code once it has exited."""
        assert self._process is not None
        self._process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(asyncio.to_thread(self._process.wait), STOP_TIMEOUT)

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
