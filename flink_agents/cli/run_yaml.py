"""``flink-agents run-yaml FILE... --input IN.jsonl``: run an agent declared
in YAML (``flink_agents.api.yaml``) over a JSON-lines input, on the embedded
local runner or on a local Flink mini-cluster, and write one JSON line per
output (``OutputEvent.output``).

Function and class references in the files are imported from the current
directory, the files' directories and the installed packages (those
directories are put on ``sys.path``, and on ``PYTHONPATH`` for Flink's
Python workers).

Exit codes: 0 done, 2 bad files, arguments or input (the message names the
file, the line and, for YAML, the key), 1 the run failed.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, TextIO, Tuple

from flink_agents._private_files import replace_when_done

__all__ = ["read_records", "run_yaml"]


class _Usage(Exception):
    """A problem the user fixes in the command line or the files (exit 2)."""


def read_records(path: Path, key_field: str | None) -> List[Tuple[Any, Any]]:
    """``(key, record)`` per non-blank line of ``path``: the key is the
    record's ``key_field``, or None (the runner assigns one).

    Raises:
        _Usage: Unreadable file, a line that is not JSON, or a record
            without ``key_field`` (or whose key is not a JSON scalar),
            named as ``FILE:LINE``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _Usage(f"{path}: cannot read the input: {exc}") from None
    records: List[Tuple[Any, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _Usage(f"{path}:{number}: not a JSON value: {exc}") from None
        key = None
        if key_field is not None:
            if not isinstance(record, dict) or key_field not in record:
                raise _Usage(f"{path}:{number}: the record has no field {key_field!r} (--key)")
            key = record[key_field]
            if not isinstance(key, (str, int, float, bool)):
                raise _Usage(f"{path}:{number}: key field {key_field!r} is a {type(key).__name__}; "
                             "expected a string or a number")
        records.append((key, record))
    return records


def _json_default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # pydantic models, events
    if callable(dump):
        return dump(mode="json")
    as_dict = getattr(value, "as_dict", None)  # pyflink Row
    if callable(as_dict):
        return as_dict()
    return str(value)


def _write(outputs: Iterator[Any], sink: TextIO) -> int:
    count = 0
    for output in outputs:
        sink.write(json.dumps(output, default=_json_default, ensure_ascii=False) + "\n")
        sink.flush()
        count += 1
    return count


def _import_roots(files: List[Path]) -> List[str]:
    """The current directory and the files' directories, which user modules
    named in the files are imported from."""
    roots = [os.getcwd(), *(str(f.resolve().parent) for f in files)]
    return list(dict.fromkeys(roots))


def _use_import_roots(roots: List[str]) -> None:
    for root in reversed(roots):
        if root not in sys.path:
            sys.path.insert(0, root)
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*roots, *current]))


def _pick_agent(env: Any, wanted: str | None, files: List[Path]) -> str:
    names = sorted(env._agents)
    if wanted is not None:
        if wanted not in names:
            raise _Usage(f"--agent {wanted!r}: no such agent in {', '.join(map(str, files))} "
                         f"(agents: {', '.join(names) or 'none'})")
        return wanted
    if not names:
        raise _Usage(f"{', '.join(map(str, files))}: no agent is declared (an 'agents:' list)")
    if len(names) > 1:
        raise _Usage(f"the files declare {len(names)} agents ({', '.join(names)}): choose one with --agent")
    return names[0]


def _load(env: Any, files: List[Path], wanted: str | None) -> str:
    from flink_agents.api.yaml.loader import YamlAgentError

    try:
        env.load_yaml(files)
    except YamlAgentError as exc:
        raise _Usage(str(exc)) from None
    return _pick_agent(env, wanted, files)


def _run_local(args: argparse.Namespace, records: List[Tuple[Any, Any]], sink: TextIO) -> int:
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    env = AgentsExecutionEnvironment.get_execution_environment()
    name = _load(env, args.files, args.agent)
    rows: List[Dict[str, Any]] = [
        {"value": record} if key is None else {"key": key, "value": record} for key, record in records
    ]
    outputs = env.from_list(rows).apply(name).to_list()
    env.execute()
    return _write((value for output in outputs for value in output.values()), sink)


def _run_flink(args: argparse.Namespace, records: List[Tuple[Any, Any]], sink: TextIO) -> int:
    if args.key is None:
        raise _Usage("--runner flink needs --key FIELD: a Flink job keys every record")
    if args.parallelism < 1:
        raise _Usage(f"--parallelism must be at least 1, not {args.parallelism}")
    from pyflink.common import Configuration, Types
    from pyflink.datastream import StreamExecutionEnvironment

    from flink_agents.api.execution_environment import AgentsExecutionEnvironment
    from flink_agents.runtime.flink.failures import job_failures

    config = Configuration()
    config.set_string("python.executable", sys.executable)  # workers need this venv
    config.set_string("restart-strategy.type", "none")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(args.parallelism)
    with tempfile.TemporaryDirectory(prefix="flink-agents-run-yaml-") as directory:
        agents_env = AgentsExecutionEnvironment.get_execution_environment(
            env, **{"journal.sqlite.path": os.path.join(directory, "journal.db")}
        )
        name = _load(agents_env, args.files, args.agent)
        values = env.from_collection([json.dumps(record) for _, record in records], type_info=Types.STRING())
        decoded = values.map(json.loads, output_type=Types.PICKLED_BYTE_ARRAY())
        outputs = agents_env.from_datastream(decoded, operator.itemgetter(args.key)).apply(name).to_datastream()
        with job_failures(), outputs.execute_and_collect(f"run-yaml {name}") as collected:
            return _write(iter(collected), sink)


def run_yaml(args: argparse.Namespace) -> int:
    """The ``run-yaml`` subcommand (arguments from ``flink_agents.cli.main``).

    Returns:
        The exit code: 0 done, 2 a usage or file error (printed to stderr,
        naming the file and line), 1 the run failed.
    """
    args.files = [Path(f) for f in args.files]
    try:
        _use_import_roots(_import_roots(args.files))
        records = read_records(Path(args.input), args.key)
        run = _run_flink if args.runner == "flink" else _run_local
        if args.output is None:
            count = run(args, records, sys.stdout)
        else:
            with replace_when_done(args.output) as sink:  # private; replaced only when the run succeeded
                count = run(args, records, sink)
        print(f"run-yaml: {len(records)} records, {count} outputs", file=sys.stderr)
        return 0
    except _Usage as exc:
        print(f"flink-agents run-yaml: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the run failed: one line, the cause named
        print(f"flink-agents run-yaml: the run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
