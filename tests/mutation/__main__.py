"""Mutation testing of the rules that keep the registry honest: `python -m tests.mutation`.

mutmut (pinned in the `mutation` extra) changes one thing at a time in the modules that
`[tool.mutmut] only_mutate` in pyproject.toml lists (a comparison, a constant, a call's
argument...) and runs the fast tests that reach the changed function, fastest first; a mutant
is killed when one of them fails. This runner runs mutmut over those modules (or only those a
change touched, `--changed REF`), then judges each module: at least `TARGET` of its mutants
killed, and every survivor either killed by a test or listed in `equivalent/` with why no
behaviour can tell it apart. It exits 1 otherwise, naming each unexplained survivor with its
diff. mutmut keeps its stats in `mutants/` and reuses them while the tests are unchanged; the
mutants of each module named to it are all tested again.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.mutation import GROUP, HELD, SUITES

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT = Path(__file__).with_name("equivalent")  # one TOML file per module
TARGET = 0.90  # of each module's mutants, equivalent ones set aside

# mutmut's exit codes (mutmut/stats.py): 1 and 3 a failing test, 0 every test passed.
KILLED, SURVIVED = {1, 3}, {0}
TIMEOUT = {24, -24, 36, 152, 255}


@dataclass
class Module:
    path: str
    outcomes: Counter[str] = field(default_factory=Counter)
    survivors: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")

    def score(self) -> float:
        judged = sum(self.outcomes.values()) - self.outcomes["equivalent"]
        detected = self.outcomes["killed"] + self.outcomes["timeout"]
        return detected / judged if judged else 1.0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__)
    parser.add_argument("modules", nargs="*", help="paths of listed modules (default: all)")
    parser.add_argument("--changed", metavar="REF", help="only modules changed since REF")
    parser.add_argument(
        "--budget",
        type=float,
        metavar="MINUTES",
        help="start no module's run after this long: the most recently changed run first",
    )
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once")
    args = parser.parse_args()

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    if set(config["only_mutate"]) != set(SUITES):
        parser.error("[tool.mutmut] only_mutate and tests/mutation SUITES must name the same")
    listed = listed_modules(config)
    if not HELD <= set(listed):
        parser.error(f"HELD names modules not listed: {sorted(HELD - set(listed))}")
    chosen = [m for m in listed if not args.modules or m in args.modules]
    if args.modules and len(chosen) != len(set(args.modules)):
        parser.error(f"not listed in [tool.mutmut] only_mutate: {set(args.modules) - set(chosen)}")
    if args.changed:
        touched = set(git("diff", "--name-only", args.changed, "--").split())
        chosen = [m for m in chosen if m in touched]
    if not chosen:
        print("no listed module changed: nothing to mutate")
        return 0
    # One mutmut run per group of modules judged by the same suites, the group changed last
    # first, so that a budget spent still judged what changed.
    groups: dict[str, list[Module]] = {}
    for path in sorted(chosen, key=last_changed, reverse=True):
        pattern = next(p for p in SUITES if fnmatch.fnmatch(path, p))
        groups.setdefault(pattern, []).append(Module(path))
    started = time.monotonic()
    judged: list[Module] = []
    failed: list[str] = []
    for pattern, modules in groups.items():
        if args.budget is not None and time.monotonic() - started > 60 * args.budget:
            print(f"budget of {args.budget:g} min spent: {pattern} not run")
            continue
        names = [f"{module.name}.*" for module in modules]
        command = [sys.executable, "-m", "mutmut", "run", f"--max-children={args.max_children}"]
        env = {**os.environ, GROUP: " ".join(SUITES[pattern])}
        if subprocess.run([*command, *names], cwd=ROOT, env=env).returncode != 0:
            # mutmut stops before judging when the unmutated tests fail (its clean run): say
            # so for each module of the group, a problem like any other.
            failed.extend(module.path for module in modules)
            continue
        judged.extend(modules)
    problems = judge(judged, load_equivalent())
    for path in chosen:
        problems.setdefault(path, []).extend(decorated(path))
    for path in failed:
        problems[path] = [f"{path}: mutmut stopped before judging it (its output is above)"]
    print(report(judged))
    failing = False
    for module, found in problems.items():
        held = module in HELD
        failing = failing or (held and bool(found))
        for problem in found:
            print(problem if held else f"(not yet held) {problem}")
    return 1 if failing else 0


def last_changed(path: str) -> int:
    """When `path` last changed: its last commit's time, or now when it has changes of its own."""
    if git("status", "--porcelain", "--", path).strip():
        return int(time.time())
    return int(git("log", "-1", "--format=%ct", "--", path).strip() or 0)


def listed_modules(config: dict[str, list[str]]) -> list[str]:
    """Every file the `only_mutate` patterns match, in the order they are listed."""
    found: list[str] = []
    for pattern in config["only_mutate"]:
        for source in config["source_paths"]:
            for path in sorted((ROOT / source).rglob("*.py")):
                relative = path.relative_to(ROOT).as_posix()
                if fnmatch.fnmatch(relative, pattern) and relative not in found:
                    found.append(relative)
    return found


def decorated(path: str) -> list[str]:
    """The functions of `path` that mutmut leaves alone, each a problem: it mutates no
    decorated function but a static or class method (a property, a cached function)."""
    allowed = {"staticmethod", "classmethod"}
    return [
        f"{path}:{node.lineno}: {node.name} is decorated, so never mutated: make it a plain "
        "function or method (apply a cache apart from the definition)"
        for node in ast.walk(ast.parse((ROOT / path).read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(not (isinstance(d, ast.Name) and d.id in allowed) for d in node.decorator_list)
    ]


def load_equivalent() -> dict[str, dict[str, str]]:
    """Mutant name -> its `change` (the mutated line as mutmut writes it, so that a mutant
    renumbered after an edit is not taken for the one judged) and `why`."""
    entries = [
        entry
        for listing in sorted(EQUIVALENT.glob("*.toml"))
        for entry in tomllib.loads(listing.read_text()).get("equivalent", [])
    ]
    return {entry["mutant"]: entry for entry in entries}


def judge(modules: list[Module], equivalent: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """Each module's outcomes counted; its problems by module path."""
    problems: dict[str, list[str]] = {}
    for module in modules:
        found = problems.setdefault(module.path, [])
        meta = ROOT / "mutants" / (module.path + ".meta")
        codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
        for mutant, code in codes.items():
            if code in KILLED or code in TIMEOUT:
                outcome = "killed" if code in KILLED else "timeout"
                if mutant in equivalent:
                    found.append(f"{mutant} is listed as equivalent but a test kills it")
            elif code in SURVIVED:
                change = diff(mutant)
                entry = equivalent.get(mutant)
                if entry is not None and entry["change"].strip() in change:
                    outcome = "equivalent"
                else:
                    outcome = "survived"
                    module.survivors.append(f"{mutant}\n{change}")
            else:
                outcome = "not run" if code is None else f"exit {code}"
            module.outcomes[outcome] += 1
        if not meta.exists():
            found.append(f"{module.path}: mutmut left no results")
        elif not codes:
            continue  # nothing in it to mutate (a package's __init__ of imports)
        elif module.score() < TARGET:
            found.append(f"{module.path}: {module.score():.1%} killed, below {TARGET:.0%}")
        found.extend(f"survived, not listed as equivalent: {s}" for s in module.survivors)
    return problems


def diff(mutant: str) -> str:
    """The mutant's change as `mutmut show` prints it: its diff's + and - lines."""
    shown = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", mutant],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = shown.splitlines()
    return "\n".join(s for s in lines if s[:1] in "+-" and s[:3] not in ("+++", "---"))


def report(modules: list[Module]) -> str:
    kinds = ["killed", "timeout", "equivalent", "survived"]
    others = sorted({o for m in modules for o in m.outcomes} - set(kinds))
    head = ["module", "mutants", *kinds, *others, "score"]
    rows = [head]
    for module in modules:
        counts = [str(module.outcomes[kind]) for kind in (*kinds, *others)]
        total = str(sum(module.outcomes.values()))
        rows.append([module.path, total, *counts, f"{module.score():.1%}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(lines)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


if __name__ == "__main__":
    sys.exit(main())
