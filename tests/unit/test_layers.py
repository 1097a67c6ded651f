"""Layers: api -> plan -> runtime, and only runtime/flink knows PyFlink.

Checked two ways: statically, over every ``import``/``from`` statement at any
level of each source file (so a function-level import counts too), and by
importing each layer in a fresh interpreter and looking at ``sys.modules``
(which also catches a layer reaching another through a third module).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "flink_agents"
IMPORTLIB_ALLOWED = {PACKAGE / "api" / "execution_environment.py"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path) -> str:
    module = _module_name(path)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imports(source: str, package: str) -> Iterator[Tuple[int, str]]:
    """(line, absolute module name) of every import statement of ``source``,
    a module of ``package``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # ``from flink_agents import runtime``
                yield node.lineno, f"{target}.{alias.name}"


def _string_imports(source: str) -> Iterator[Tuple[int, str]]:
    """(line, name) of ``importlib.import_module("...")``/``__import__("...")`` calls."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        arg = node.args[0]
        if name in ("import_module", "__import__") and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            yield node.lineno, arg.value


def _sources(layer: str, exclude: str | None = None) -> List[Path]:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    if exclude:
        files = [f for f in files if not f.is_relative_to(PACKAGE / exclude)]
    assert files, f"no sources under flink_agents/{layer}"
    return files


def _violations(files: List[Path], forbidden: str, include_strings: bool) -> List[str]:
    found = []
    for path in files:
        source = path.read_text()
        found += [
            f"{path.relative_to(ROOT)}:{line} imports {name}"
            for line, name in _imports(source, _package_of(path))
            if name == forbidden or name.startswith(forbidden + ".")
        ]
        if include_strings and path not in IMPORTLIB_ALLOWED:
            found += [
                f"{path.relative_to(ROOT)}:{line} imports {name!r} by name"
                for line, name in _string_imports(source)
                if name == forbidden or name.startswith(forbidden + ".")
            ]
    return found


def test_the_import_walker_sees_function_level_relative_and_by_name_imports():
    source = (
        "import os\n"
        "def f():\n"
        "    from flink_agents.runtime import engine\n"
        "    from ..runtime.state import KeyState\n"
        "    from .. import runtime\n"
        "    import importlib; importlib.import_module('flink_agents.runtime.local')\n"
    )

    names = [name for _, name in _imports(source, "flink_agents.api")]

    assert "flink_agents.runtime.engine" in names
    assert "flink_agents.runtime.state" in names
    assert "flink_agents.runtime" in names
    assert [name for _, name in _string_imports(source)] == ["flink_agents.runtime.local"]


def test_api_never_imports_runtime():
    assert _violations(_sources("api"), "flink_agents.runtime", include_strings=True) == []


def test_plan_never_imports_runtime():
    assert _violations(_sources("plan"), "flink_agents.runtime", include_strings=True) == []


def test_runtime_outside_its_flink_driver_never_imports_pyflink():
    assert _violations(_sources("runtime", exclude="runtime/flink"), "pyflink", include_strings=True) == []


def _runtime_imports(part: str) -> List[Tuple[str, str]]:
    """(file:line, module) of each import of ``flink_agents.runtime.*`` made
    by files of ``runtime/<part>``, other than imports within ``part``."""
    own = f"flink_agents.runtime.{part}"
    found = []
    for path in _sources(f"runtime/{part}"):
        for line, name in _imports(path.read_text(), _package_of(path)):
            if name.startswith("flink_agents.runtime.") and not (name == own or name.startswith(own + ".")):
                found.append((f"{path.relative_to(ROOT)}:{line}", name))
    return found


def _under(name: str, *parts: str) -> bool:
    return any(name == f"flink_agents.runtime.{p}" or name.startswith(f"flink_agents.runtime.{p}.") for p in parts)


def test_durability_imports_no_other_part_of_the_runtime_but_its_errors():
    assert [(at, name) for at, name in _runtime_imports("durability") if not _under(name, "errors")] == []


def test_scheduling_imports_no_feature_and_no_host():
    assert [(at, name) for at, name in _runtime_imports("scheduling") if _under(name, "features", "local", "flink")] == []


def test_execution_imports_no_feature():
    """Features plug in (``runtime.execution.extensions``): the execution
    layer names none of them, at any level of a file."""
    assert [(at, name) for at, name in _runtime_imports("execution") if _under(name, "features")] == []


def test_importing_the_execution_layer_loads_no_feature():
    modules = [_module_name(p) for p in _sources("runtime/execution")]
    script = f"""
import importlib, sys
for m in {modules!r}:
    importlib.import_module(m)
loaded = sorted(m for m in sys.modules if m.startswith("flink_agents.runtime.features"))
assert not loaded, ("execution loaded", loaded)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr


def test_only_the_hosts_import_a_host_and_only_they_and_the_scheduler_the_engine():
    for part in ("execution", "durability", "scheduling", "features"):
        hosts = [(at, name) for at, name in _runtime_imports(part) if _under(name, "local", "flink")]
        assert hosts == [], part
        if part != "scheduling":
            assert [(at, name) for at, name in _runtime_imports(part) if _under(name, "engine")] == [], part


def test_importing_each_layer_loads_nothing_from_a_lower_one():
    def modules(layer: str, exclude: str | None = None) -> List[str]:
        return [_module_name(p) for p in _sources(layer, exclude)]

    script = f"""
import importlib, importlib.util, sys
def loaded(prefix):
    return sorted(m for m in sys.modules if m == prefix or m.startswith(prefix + "."))
for m in {modules("api")!r}:
    importlib.import_module(m)
assert not loaded("flink_agents.runtime"), ("api loaded", loaded("flink_agents.runtime"))
assert not loaded("pyflink"), ("api loaded", loaded("pyflink"))
for m in {modules("plan")!r}:
    importlib.import_module(m)
assert not loaded("flink_agents.runtime"), ("plan loaded", loaded("flink_agents.runtime"))
for m in {modules("runtime", exclude="runtime/flink")!r}:
    if m.startswith("flink_agents.runtime.memory.mem0") and importlib.util.find_spec("mem0") is None:
        continue  # the mem0 extra is absent (it cannot be installed beside apache-flink 1.20)
    importlib.import_module(m)
assert not loaded("pyflink"), ("runtime loaded", loaded("pyflink"))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr


def test_the_private_helpers_sit_below_every_layer():
    """``flink_agents/_private_files.py`` serves stores, runtime, jobs and
    CLI alike, and ``flink_agents/_sdk.py`` (``import_sdk``) the
    integrations and the runtime's optional backends, so they import the
    standard library only."""
    for helper in ("_private_files.py", "_sdk.py"):
        names = {name.split(".")[0] for _, name in _imports((PACKAGE / helper).read_text(), "flink_agents")}

        assert names and names <= set(sys.stdlib_module_names), (helper, names - set(sys.stdlib_module_names))


# --- integrations use the runtime's public seam; the runtime uses no integration ---------------

# The modules of flink_agents.runtime an integration may import (each documents itself as such).
RUNTIME_SEAMS = ("flink_agents.runtime.durable",)


def _runtime_reach_ins(files: List[Path]) -> List[str]:
    """Each import of a ``flink_agents.runtime`` module other than a seam
    (the bare package too: ``from flink_agents.runtime import engine``
    names both)."""
    return [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in files
        for line, name in _imports(path.read_text(), _package_of(path))
        if (name == "flink_agents.runtime" or name.startswith("flink_agents.runtime."))
        and not any(name == seam or name.startswith(seam + ".") for seam in RUNTIME_SEAMS)
    ]


def test_integrations_import_only_the_runtimes_public_seam():
    found = _runtime_reach_ins(_sources("integrations"))
    assert found == [], "integrations reach into the runtime past runtime/durable.py:\n" + "\n".join(found)
    # The walker sees the seam where the integrations use it, and a reach-in past it.
    assert _violations(_sources("integrations"), "flink_agents.runtime.durable", include_strings=False)
    assert _runtime_reach_ins([PACKAGE / "runtime" / "engine.py"])


def test_the_seam_hides_probes_of_the_context():
    """Integrations ask the seam (``durable.action_context``), not the
    context's attributes, whether they run in an action, and call no
    private method of it."""
    found = []
    for path in _sources("integrations"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hasattr" and node.args \
                    and ast.unparse(node.args[0]) in ("ctx", "self._ctx", "context"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("ctx", "self._ctx") \
                    and node.attr.startswith("_"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def test_runtime_imports_no_integration():
    assert _violations(_sources("runtime"), "flink_agents.integrations", include_strings=True) == []


def test_importing_the_runtime_loads_no_integration():
    modules = [_module_name(p) for p in _sources("runtime", exclude="runtime/flink")]
    script = f"""
import importlib, importlib.util, sys
for m in {modules!r}:
    if m.startswith("flink_agents.runtime.memory.mem0") and importlib.util.find_spec("mem0") is None:
        continue  # the mem0 extra is absent
    importlib.import_module(m)
loaded = sorted(m for m in sys.modules if m.startswith("flink_agents.integrations"))
assert not loaded, ("runtime loaded", loaded)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr


# --- one module issues journal commits ---------------------------------------------------------

JOURNAL_MODULE = PACKAGE / "runtime" / "durability" / "journal.py"
# A journal store's writes, and RunJournal's commit primitives: a run's
# commit points are RunJournal's named methods (its module docstring).
_COMMIT_CALLS = {"append", "_commit", "_commit_async", "_commit_through", "_write_in_thread"}


def _commit_calls(source: str) -> Iterator[Tuple[int, str]]:
    """(line, name) of calls ``x.append(...)`` whose receiver names a store
    (``store``, ``self._store``) and of RunJournal's commit primitives."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, receiver = node.func.attr, ast.unparse(node.func.value)
        if name == "append" and receiver.rpartition(".")[2].lstrip("_") in ("store", "journal_store"):
            yield node.lineno, f"{receiver}.append"
        elif name in _COMMIT_CALLS - {"append"}:
            yield node.lineno, f"{receiver}.{name}"


def test_only_the_run_journal_issues_journal_commits():
    found = [
        f"{path.relative_to(ROOT)}:{line} calls {call}"
        for path in sorted((PACKAGE / "runtime").rglob("*.py")) + sorted((PACKAGE / "integrations").rglob("*.py"))
        if path != JOURNAL_MODULE
        for line, call in _commit_calls(path.read_text())
    ]
    assert found == [], "journal commits outside runtime/durability/journal.py:\n" + "\n".join(found)
    # The walker sees them where they are.
    assert {call for _, call in _commit_calls(JOURNAL_MODULE.read_text())} >= {
        "self._store.append", "self._commit", "self._commit_async"}


def test_the_commit_walker_catches_a_commit_elsewhere():
    assert sorted(call for _, call in _commit_calls("async def f(j, store):\n    await j._commit_async()\n"
                                                    "    self._store.append('j', 'k', 0, [])\n")) == [
        "j._commit_async", "self._store.append"]
