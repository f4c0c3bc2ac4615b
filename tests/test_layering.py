"""Which part of the code may import which: the layers DESIGN.md draws, checked."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported(package: str) -> dict[str, set[str]]:
    """Module path -> the modules it imports (absolute names), for every module of `package`."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


def of(names: set[str], package: str) -> set[str]:
    return {name for name in names if name == package or name.startswith(package + ".")}


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("peers", "registry.http"),  # peers replicate; reading HTTP requests is registry.http's
        ("registry/http", "peers"),  # handlers reach the peers' parts through the app's keys
    ],
)
def test_a_layer_does_not_import_the_other(package, forbidden):
    assert {} == {
        module: of(names, forbidden)
        for module, names in imported(package).items()
        if of(names, forbidden)
    }


def test_the_core_loads_no_web_framework():
    """`registry.core` (with the model and the rule chain) is usable without aiohttp."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, registry.core; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'aiosqlite')))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "[]" == loaded.stdout.strip()
