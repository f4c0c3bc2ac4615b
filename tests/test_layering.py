"""Which part of the code may import which: the layers DESIGN.md draws, checked."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

from registry.core.registry import Registry

ROOT = Path(__file__).resolve().parent.parent


def imported(package: str) -> dict[str, set[str]]:
    """Module path -> the modules it imports (absolute names), for every module of `package`."""
    return {
        str(path.relative_to(ROOT)): imports_of(path)
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def imports_of(path: Path) -> set[str]:
    """The modules one file imports (absolute names), under TYPE_CHECKING too."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def of(names: set[str], package: str) -> set[str]:
    return {name for name in names if name == package or name.startswith(package + ".")}


# (package, what it must not import): the layers of docs/architecture.md.
LAYERS = [
    # The core decides; it knows nothing of how changes are read, served, stored or sent.
    ("registry/core", "registry.reads"),
    ("registry/core", "registry.health"),
    ("registry/core", "registry.http"),
    ("registry/core", "registry.store"),
    ("registry/core", "registry.codec"),
    ("registry/core", "peers"),
    ("registry/core", "aiohttp"),
    # The read side keeps documents ready; handlers serve them.
    ("registry/reads", "registry.http"),
    ("registry/reads", "registry.store"),
    ("registry/reads", "peers"),
    ("registry/store", "registry.http"),
    ("registry/store", "peers"),
    ("peers", "registry.http"),  # peers replicate; reading HTTP requests is registry.http's
    ("peers", "registry.store"),  # what the store restored reaches peers as values (joining.py)
    ("registry/http", "peers"),  # handlers reach the peers' parts through the app's keys
    # The wire formats, the process's health and the server-side checks serve the rest, and
    # run on their own: none reaches the handlers, the store or the peers.
    *(
        (package, forbidden)
        for package in ("registry/codec", "registry/health", "registry/checks")
        for forbidden in ("registry.http", "registry.store", "peers")
    ),
    # What the server and the client share depends on neither.
    ("registry/common", "registry.core"),
    ("registry/common", "registry.client"),
]


@pytest.mark.parametrize(("package", "forbidden"), LAYERS)
def test_a_layer_does_not_import_the_other(package, forbidden):
    assert {} == {
        module: of(names, forbidden)
        for module, names in imported(package).items()
        if of(names, forbidden)
    }


def test_the_layer_rules_name_packages_that_exist():
    """A rule about a package renamed away would pass forever."""
    for package, forbidden in LAYERS:
        assert (ROOT / package).is_dir(), package
        assert (ROOT / forbidden.replace(".", "/")).exists() or forbidden == "aiohttp", forbidden


def module_graph(*packages: str) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports anywhere in its text (type-only imports
    and imports inside functions too). `from package import module` is an edge to the module
    alone: a package's own names are imported from it only by `from package import name`."""
    paths = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            paths[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in paths)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    module = f"{node.module}.{alias.name}"
                    if module in paths:
                        edges.add(module)
                    elif node.module in paths:
                        edges.add(node.module)
        graph[name] = edges - {name}
    return graph


def test_no_import_circles():
    """No module imports one that imports it back, even for types only: each module can be
    read (and loaded) after the ones it names."""
    try:
        graphlib.TopologicalSorter(module_graph("registry", "peers", "rules")).prepare()
    except graphlib.CycleError as circle:
        pytest.fail(f"an import circle: {' -> '.join(circle.args[1])}")


def test_the_circle_check_sees_a_type_only_import():
    """Its positive control: the core's model imported back under TYPE_CHECKING by a module
    it imports is a circle."""
    graph = module_graph("registry", "peers", "rules")
    graph["registry.errors"].add("registry.core.model")
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()


# The parts of `Registry`: its bases, each in a module of its own, and what they share. The
# registry imports them; a part never imports the registry (it is one of its bases).
REGISTRY_PARTS = [
    "registry/core/part.py",
    "registry/core/override_commands.py",
    "registry/core/check_commands.py",
    "registry/core/removals.py",
    "registry/core/warm_restart.py",
    "registry/core/registration.py",
]
# What a part may import of this project: the core, the shared helpers, the errors, the rules.
PART_MAY_IMPORT = ("registry.core", "registry.common", "registry.errors", "rules")
# And beside the standard library, of the packages installed: only these.
PART_MAY_USE = ("structlog", "msgspec")


@pytest.mark.parametrize("module", REGISTRY_PARTS)
def test_a_part_of_the_registry_imports_only_the_core_and_what_it_rests_on(module):
    """No aiohttp, nothing of the read side, HTTP, the store, the codecs, health or peers."""
    outside = {
        name
        for name in imports_of(ROOT / module)
        if not name.startswith(tuple(f"{allowed}." for allowed in PART_MAY_IMPORT))
        and name not in PART_MAY_IMPORT
        and name.split(".")[0] not in (*sys.stdlib_module_names, *PART_MAY_USE)
    }
    assert set() == outside


@pytest.mark.parametrize("module", REGISTRY_PARTS)
def test_a_part_of_the_registry_does_not_import_the_registry(module):
    """Not even for the type checker: the registry imports its parts, never the reverse."""
    assert set() == of(imports_of(ROOT / module), "registry.core.registry")


def test_every_base_of_the_registry_is_held_to_the_parts_rules():
    """A part added to `Registry`'s bases is listed above, and every part listed exists."""
    bases = {
        cls.__module__.replace(".", "/") + ".py"
        for cls in Registry.__mro__
        if cls.__module__.startswith("registry.") and cls is not Registry
    }
    assert bases <= set(REGISTRY_PARTS)
    for module in REGISTRY_PARTS:
        assert (ROOT / module).is_file(), module


def loaded_by(statement: str) -> list[str]:
    """The modules of this project and of aiohttp's server side a fresh interpreter holds after
    running `statement`."""
    code = (
        f"import sys; {statement}; "
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('registry', 'peers', 'rules', 'aiosqlite') or m.startswith('aiohttp.web'))))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return run.stdout.split()


def test_the_core_loads_no_web_framework():
    """The core (with the model and the rule chain) is usable without aiohttp's server, the
    store or anything of the read side."""
    outside = [
        name
        for name in loaded_by("import registry.core.registry, registry.core.eviction")
        if not name.startswith(("registry.core", "registry.common", "rules"))
        and name not in ("registry", "registry.errors")
    ]
    assert [] == outside


def test_the_client_loads_nothing_of_the_server():
    """`registry.client` is a product of its own: it shares only `registry.common` and the
    status vocabulary of `rules`."""
    outside = [
        name
        for name in loaded_by("import registry.client")
        if not name.startswith(("registry.client", "registry.common", "rules"))
        and name != "registry"
    ]
    assert [] == outside
