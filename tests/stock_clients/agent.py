"""py-eureka-client, unmodified from PyPI, in a process of its own (`py_eureka_agent.py`): started
against a server, asked over stdin, answering JSON lines, killed on the way out."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

AGENT = Path(__file__).with_name("py_eureka_agent.py")
APP = "PYCLIENT"
IID = "127.0.0.1:pyclient:9999"
TIMEOUT = 20.0


class Agent:
    """The running client: a command written to it, its answer read back."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command.encode() + b"\n")
        await self.process.stdin.drain()
        return await self.answer()

    async def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT)
        assert line, "the client process ended early"
        return json.loads(line)  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def running_agent(url: str) -> AsyncIterator[Agent]:
    """The client in its own process, against `url`, heartbeating every second."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(AGENT),
        url,
        APP.lower(),
        "9999",
        "1",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield Agent(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
