"""Drive a workload against a server from another process: wrk when installed, else Python."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.bench import workloads


@dataclass(frozen=True)
class Result:
    requests: int
    seconds: float
    errors: int
    non_2xx: int
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        """Answers a second, counting only the 2xx: a refusal is no throughput."""
        return (self.requests - self.non_2xx) / self.seconds if self.seconds else 0.0


class LoadGenerator:
    def __init__(self, *, connections: int, prefer_wrk: bool = True) -> None:
        self.connections = connections
        self.wrk = shutil.which("wrk") if prefer_wrk else None

    @property
    def name(self) -> str:
        return "wrk" if self.wrk else "python (aiohttp) fallback"

    async def run(
        self, base_url: str, workload: workloads.Workload, seconds: float, spec: dict[str, object]
    ) -> Result:
        """`spec` names the workload for the Python fallback (kind, instances, path, headers)."""
        if self.wrk:
            return await self._run_wrk(base_url, workload, seconds)
        return await self._run_python(base_url, seconds, spec)

    async def _run_wrk(self, base_url: str, workload: workloads.Workload, seconds: float) -> Result:
        with tempfile.TemporaryDirectory(prefix="bench-lua-") as tmp:
            script = Path(tmp) / f"{workload.name}.lua"
            script.write_text(workload.lua + workloads.LUA_REPORT)
            output = await _output(
                self.wrk or "wrk",
                "-t1",
                f"-c{self.connections}",
                f"-d{max(1, round(seconds))}s",
                "-s",
                str(script),
                base_url,
            )
        return _result(output)

    async def _run_python(self, base_url: str, seconds: float, spec: dict[str, object]) -> Result:
        full_spec = {**spec, "url": base_url, "seconds": seconds, "connections": self.connections}
        output = await _output(sys.executable, "-m", "tests.bench.pyload", json.dumps(full_spec))
        return _result(output)


def _result(output: str) -> Result:
    line = [line for line in output.splitlines() if line.startswith("{")][-1]
    return Result(**json.loads(line))


async def _output(*command: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {stderr.decode()[-500:]}")
    return stdout.decode()
