"""Registry server processes, as every test that needs a real one starts it: `python -m registry
serve` on a free loopback port, with settings (given as `section__key=value`) as
REGISTRY_<SECTION>__<KEY> variables and none inherited from the test's own environment, its log
(stderr) in a file; waited for until it answers, stopped with a signal and waited for. `run` is
`python -m registry ...` to its end (the admin commands, refused start-ups).

A server is a `subprocess.Popen`, not an asyncio process: a module-scoped fixture may start one
before any test's event loop exists, and a process is never tied to the loop that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.helpers import free_port

HOST = "127.0.0.1"
READY_TIMEOUT = 20.0  # for a server to answer after its start
STOP_TIMEOUT = 20.0  # for a stopped server to write what it owes and exit
POLL = 0.02  # seconds between looks at a process that starts or exits


def registry_env(settings: Mapping[str, object] = {}) -> dict[str, str]:
    """The environment of a server process: this one's without its REGISTRY_* variables (the
    suite's own knobs, such as REGISTRY_CRASH_SEED, are no server settings), and `settings` as
    REGISTRY_* variables: a setting named `section__key` (`store__enabled`) as
    REGISTRY_<SECTION>__<KEY>, any other name (the admin CLI's `user`) as REGISTRY_<NAME>."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    return env | {f"REGISTRY_{key.upper()}": _text(value) for key, value in settings.items()}


def serve_command(port: int, *args: str) -> list[str]:
    """`python -m registry serve --port PORT ARGS`."""
    return [sys.executable, "-m", "registry", "serve", "--port", str(port), *args]


class ServerProcess:
    """One `python -m registry serve`; after a stop it can be started again on the same port
    and log file (a restart).

    `log`: the file its stderr is appended to. `args`: more command-line arguments (`--peers`,
    `--config`); `host` is passed as `--host` when it is not loopback. `wrapper`: a command the
    server runs under (`ip netns exec NAME`).
    """

    def __init__(
        self,
        log: Path,
        port: int | None = None,
        *,
        settings: Mapping[str, object] = {},
        args: Sequence[str] = (),
        host: str = HOST,
        wrapper: Sequence[str] = (),
    ) -> None:
        self.log = log
        self.port = port or free_port()
        self.host = host
        self.settings = dict(settings)
        host_args = ("--host", host) if host != HOST else ()
        self.command = [*wrapper, *serve_command(self.port, *host_args, *args)]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        """Its URL without a path: `http://127.0.0.1:PORT`."""
        return f"http://{self.host}:{self.port}"

    @property
    def eureka(self) -> str:
        """The base URL of its Eureka API, as clients and peers are given it."""
        return f"{self.base}/eureka/"

    @property
    def pid(self) -> int:
        """The process id of its latest start."""
        assert self.process is not None, "not started"
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """Its exit code, or None while it runs (or before it started)."""
        return None if self.process is None else self.process.poll()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # Starting -------------------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process and return at once (blocking: a fork and an exec). For a fixture
        outside any event loop; a test awaits `start`."""
        assert not self.running, "already running"
        with self.log.open("ab") as log:  # the child holds it open; this process need not
            self.process = subprocess.Popen(
                self.command,
                env=registry_env(self.settings),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    async def start(
        self, *, ready: str | None = "/readyz", timeout: float = READY_TIMEOUT
    ) -> ServerProcess:
        """Start the process; once `ready` (a path) answers 200, unless it is None."""
        await asyncio.to_thread(self.spawn)
        if ready is not None:
            await self.wait_ready(ready, timeout=timeout)
        return self

    async def wait_ready(
        self, path: str = "/readyz", *, timeout: float = READY_TIMEOUT, poll: float = POLL
    ) -> None:
        """Poll `path` until it answers 200: `/readyz` once the server serves, `/healthz` once
        it listens (a node still syncing, or degraded). RuntimeError, with the end of its log,
        when it exits first or does not answer within `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(self.base + path) as response:
                        if response.status == 200:
                            return
                if self.returncode is not None:
                    problem = f"{self.base} exited with {self.returncode}"
                    raise RuntimeError(f"{problem}\n{await self.tail()}")
                if asyncio.get_running_loop().time() > deadline:
                    problem = f"{self.base}{path}: no 200 within {timeout} s"
                    raise RuntimeError(f"{problem}\n{await self.tail()}")
                await asyncio.sleep(poll)

    # Stopping -------------------------------------------------------------------------------

    def send_signal(self, sig: int) -> None:
        assert self.process is not None, "not started"
        self.process.send_signal(sig)

    async def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        """Its exit code, once it has exited; TimeoutError after `timeout`."""
        assert self.process is not None, "not started"
        deadline = asyncio.get_running_loop().time() + timeout
        while (code := self.process.poll()) is None:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{self.base} still runs after {timeout} s")
            await asyncio.sleep(POLL)
        return code

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Send `sig` (SIGTERM: the drain a service manager asks for) and wait for the exit; its
        exit code. One still running after `timeout` is killed, and that is an error."""
        if self.running:
            self.send_signal(sig)
        try:
            return await self.wait(timeout)
        except TimeoutError:
            await self.kill()
            raise RuntimeError(f"{self.base} did not stop within {timeout} s of {sig!r}") from None

    async def kill(self) -> None:
        """SIGKILL, if it still runs: no drain, no goodbye to its peers."""
        if self.running:
            self.send_signal(signal.SIGKILL)
        if self.process is not None:
            await self.wait()

    def stop_blocking(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """`stop`, for a fixture outside any event loop."""
        assert self.process is not None, "not started"
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"{self.base} did not stop within {timeout} s of {sig!r}") from None

    # Its log --------------------------------------------------------------------------------

    def log_text(self) -> str:
        """Everything it has logged so far (blocking: a file read)."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def tail(self, chars: int = 3000) -> str:
        return f"--- end of {self.log} ---\n{(await asyncio.to_thread(self.log_text))[-chars:]}"

    async def log_lines(self) -> list[dict[str, Any]]:
        """Its log, a JSON object a line (`log_format` json, or no terminal); a line that is
        not JSON fails."""
        return [json.loads(line) for line in (await asyncio.to_thread(self.log_text)).splitlines()]

    async def wait_logged(
        self, event: str, *, timeout: float = READY_TIMEOUT, **fields: object
    ) -> dict[str, Any]:
        """The first line it logged with `event` (and `fields`), once it has; AssertionError
        after `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for line in (await asyncio.to_thread(self.log_text)).splitlines():
                with contextlib.suppress(ValueError):
                    logged = json.loads(line)
                    if logged.get("event") == event and fields.items() <= logged.items():
                        return logged  # type: ignore[no-any-return]
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"no {event} {fields} logged within {timeout} s")
            await asyncio.sleep(POLL)


class Servers:
    """The server processes one test made, their logs in its directory; all killed when it
    ends (the `servers` fixture)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.made: list[ServerProcess] = []

    def new(
        self, port: int | None = None, *, args: Sequence[str] = (), **settings: object
    ) -> ServerProcess:
        """A server not started yet, on `port` or a free one, with `settings`."""
        port = port or free_port()
        log = self.directory / f"server-{port}.log"
        self.made.append(ServerProcess(log, port, settings=settings, args=args))
        return self.made[-1]

    async def start(
        self,
        port: int | None = None,
        *,
        args: Sequence[str] = (),
        ready: str | None = "/readyz",
        **settings: object,
    ) -> ServerProcess:
        """A new server, started; once `ready` answers 200 (see `ServerProcess.start`)."""
        return await self.new(port, args=args, **settings).start(ready=ready)

    async def kill_all(self) -> None:
        """SIGKILL to those still running; their logs are printed (pytest shows them when the
        test failed)."""
        for server in self.made:
            await server.kill()
        for server in self.made:
            print(await server.tail())


@dataclass(frozen=True)
class Finished:
    """A `python -m registry` command that ran to its end."""

    returncode: int
    stdout: str
    stderr: str


async def run(*args: str, settings: Mapping[str, object] = {}, timeout: float = 30.0) -> Finished:
    """`python -m registry ARGS` to its end (an admin command, a start-up that is refused),
    with `settings` as REGISTRY_* variables as for a server."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "registry",
        *args,
        env=registry_env(settings),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return Finished(process.returncode, out.decode(), err.decode())


def _text(value: object) -> str:
    """A setting as the environment spells it."""
    return str(value).lower() if isinstance(value, bool) else str(value)
