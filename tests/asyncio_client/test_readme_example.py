"""The README's example of `registry.client`, run as written against a real server."""

from __future__ import annotations

import asyncio
import re
import sys

import pytest

from tests.asyncio_client.servers import session, start_node
from tests.helpers import ROOT

__all__ = ["session", "start_node"]  # fixtures

pytestmark = pytest.mark.slow


def example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### The asyncio client") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


EXAMPLE = example()  # read at import: a test on the event loop must not block on a file


async def test_the_readme_example_runs(start_node, session, tmp_path):
    node = await start_node()
    code = EXAMPLE.replace("127.0.0.1:8761", f"127.0.0.1:{node.port}")
    assert code != EXAMPLE, "the example names the default server"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output = (await asyncio.wait_for(process.communicate(), 30))[0].decode()
    assert 0 == process.returncode, output
    assert re.search(r"^calling http://[\d.]+:9090/$", output, re.M), output
    assert re.search(r"^ADDED \S+:billing:9090$", output, re.M), output
    assert re.search(r"^DELETED \S+:billing:9090$", output, re.M), output
    assert re.search(r"^watch Counters\(registrations=1, heartbeats=0", output, re.M), output
