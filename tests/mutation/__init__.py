"""Which fast tests judge a mutant of each module under mutation testing (`python -m
tests.mutation`): the suites that own the module's rules. mutmut would otherwise run every test
that happened to reach the mutated function (the whole server runs auth and self-preservation
on each request), minutes a surviving mutant; a rule is pinned by its own suite's tests or it is
not pinned."""

from __future__ import annotations

import fnmatch

# A module (as [tool.mutmut] only_mutate lists it) -> the test paths judging its mutants.
SUITES: dict[str, tuple[str, ...]] = {
    "rules/*": ("tests/rules", "tests/core"),
    "registry/core/preservation.py": ("tests/core",),
    "registry/core/tombstones.py": ("tests/core", "tests/peers", "tests/store"),
    "registry/core/overrides.py": (
        "tests/core",
        "tests/peers",
        "tests/store",
        "tests/http/test_admin_api.py",
    ),
    "peers/merge.py": ("tests/peers",),
    "registry/checks/spec.py": ("tests/checks",),
    "registry/checks/destinations.py": ("tests/checks",),
    "registry/http/request_body.py": (
        "tests/http/test_error_handling.py",
        "tests/http/test_client_api.py",
        "tests/peers/test_peer_signatures.py",
    ),
    "registry/http/auth.py": (
        "tests/http",
        "tests/peers",
        "tests/checks",
        "tests/test_settings.py",
    ),
    "registry/http/credentials.py": (
        "tests/http",
        "tests/peers",
        "tests/checks",
        "tests/test_settings.py",
    ),
}

# The modules held to the bar (tests/mutation/__main__.py): a problem of theirs fails the run.
# Any other listed module is run and reported, its problems printed as "not yet held", until
# its survivors are killed or explained and it joins this list; none ever leaves it.
HELD: frozenset[str] = frozenset(
    {
        "rules/__init__.py",
        "rules/chain.py",
        "rules/rules.py",
        "rules/status.py",
        "registry/core/preservation.py",
        "registry/core/tombstones.py",
        "registry/core/overrides.py",
        "peers/merge.py",
        "registry/checks/spec.py",
        "registry/checks/destinations.py",
        "registry/http/request_body.py",
        "registry/http/auth.py",
        "registry/http/credentials.py",
    }
)


# Set by the runner to the suites of the modules it hands mutmut: mutmut's clean run of the
# unmutated tests (MUTANT_UNDER_TEST empty) then runs those suites' tests alone too.
GROUP = "MUTATION_SUITES"


def judging(mutant_under_test: str, group: str | None) -> tuple[str, ...] | None:
    """The test paths to keep in a pytest run mutmut started (`MUTANT_UNDER_TEST`, the
    runner's `GROUP`), or None to keep every test: a mutant is judged by its module's suites,
    the clean run by its group's."""
    if "__mutmut_" in mutant_under_test:
        return suites_of(mutant_under_test)
    if not mutant_under_test and group:
        return tuple(group.split())
    return None


def module_path(mutant: str) -> str:
    """`registry.core.preservation.xǁSelfPreservationǁon_load__mutmut_3` ->
    `registry/core/preservation.py` (mutmut names a mutant by its module and function)."""
    parts = mutant.split(".")
    function = next(i for i, part in enumerate(parts) if part.startswith(("x_", "xǁ")))
    return "/".join(parts[:function]) + ".py"


def suites_of(mutant: str) -> tuple[str, ...]:
    """The test paths that judge `mutant`."""
    path = module_path(mutant)
    return next(tests for pattern, tests in SUITES.items() if fnmatch.fnmatch(path, pattern))
