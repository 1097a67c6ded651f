"""Whether a job's journal can serve the deployment it is submitted to.

The journal must be readable wherever a key's run resumes. On the
mini-cluster every worker runs on the client's host, so the default SQLite
file fits. On a cluster, a restored or rescaled key resumes on whichever
TaskManager gets its key group: an SQLite file on one host's local disk is
not there, and the run re-executes every call it had journaled (the model is
asked again, a tool acts twice), silently. A relative path is worse: it was
resolved against the client's working directory, which the TaskManagers do
not share.

So a cluster submission with an SQLite journal is refused, with a message
naming what to set, unless its path is absolute and declared shared
(``journal.sqlite.shared: true``: a file system every TaskManager host mounts
at that path, with working POSIX locks; on one host, any local directory).
Refusing, not warning: the failure it prevents shows only after a failover,
as repeated side effects, and the fix is one option. The journal meant for
clusters is PostgreSQL: ``journal.store: postgres`` with
``journal.postgres.dsn`` (or ``FLINK_AGENTS_POSTGRES_DSN`` in the
TaskManagers' environment, which is not the client's).

Which submissions are "a cluster" is read from Flink's ``execution.target``:
``local`` (a script run with ``python``, or ``flink run -t local``) is the
mini-cluster on this host; ``remote`` (``flink run`` to a session cluster),
``embedded`` (application mode), ``yarn-*`` and ``kubernetes-*`` are
clusters.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from flink_agents.api.configuration import readable
from flink_agents.api.core_options import RuntimeOptions
from flink_agents.stores.factory import DEFAULT_SQLITE_PATH, POSTGRES_DSN_ENV

__all__ = ["JournalPlacementError", "LOCAL_TARGETS", "check_journal_placement", "execution_target", "is_cluster"]

log = logging.getLogger(__name__)

# execution.target values that run the job on this host's mini-cluster.
LOCAL_TARGETS = frozenset({"", "local"})
_USE_POSTGRES = (
    "On a cluster use PostgreSQL: set journal.store: postgres and journal.postgres.dsn "
    f"(or {POSTGRES_DSN_ENV} in every TaskManager's environment), in the job's code or "
    "the agent: section of Flink's config.yaml"
)


class JournalPlacementError(ValueError):
    """The job's journal cannot serve the cluster it is submitted to; the
    message names the options to set."""


def is_cluster(target: str | None) -> bool:
    """Whether ``execution.target`` ``target`` runs the job off this host's
    mini-cluster (None or ``""``: Flink's default, local)."""
    return (target or "").strip().lower() not in LOCAL_TARGETS


def execution_target(env: Any) -> str:
    """The ``execution.target`` of a PyFlink ``StreamExecutionEnvironment``:
    ``local`` when the script runs on its own, what ``flink run`` set (``-t``,
    default ``remote``) when submitted; ``""`` if unset."""
    configuration = env._j_stream_execution_environment.getConfiguration()  # no PyFlink getter
    return str(configuration.toMap().get("execution.target") or "")


def check_journal_placement(config: Mapping[str, Any], target: str | None) -> None:
    """Refuse a journal that does not fit a cluster submission; on the
    mini-cluster (``target`` local) accept everything.

    Args:
        config: The job's agent configuration as the user set it (before the
            SQLite path is made absolute).
        target: Flink's ``execution.target`` (``execution_target(env)``).

    Raises:
        JournalPlacementError: On a cluster, the journal is SQLite with a
            relative path, or with an absolute path not declared shared
            (``journal.sqlite.shared``); the message names the path and the
            options (``journal.store: postgres``, ``journal.postgres.dsn``).
        ValueError: An option's value is invalid (naming the key).
    """
    if not is_cluster(target):
        return
    options = readable(config)
    kind = (options.get(RuntimeOptions.JOURNAL_STORE) or "sqlite").strip().lower()
    if kind == "sqlite":
        path = os.fspath(options.get(RuntimeOptions.JOURNAL_SQLITE_PATH) or DEFAULT_SQLITE_PATH)
        where = f"this job is submitted to a cluster (execution.target: {target})"
        if not os.path.isabs(path):
            raise JournalPlacementError(
                f"{where}, but its SQLite journal journal.sqlite.path is the relative path {path!r}, "
                "which each TaskManager would resolve in its own working directory: a run resumed on "
                f"another TaskManager would not find its journal and would repeat its calls. {_USE_POSTGRES}; "
                "or set journal.sqlite.path to an absolute path on storage every TaskManager shares "
                "and journal.sqlite.shared: true."
            )
        if not options.get(RuntimeOptions.JOURNAL_SQLITE_SHARED):
            raise JournalPlacementError(
                f"{where}, but its SQLite journal {path!r} is not declared shared: a run resumed on "
                f"another TaskManager would not find its journal and would repeat its calls. {_USE_POSTGRES}; "
                "or, if every TaskManager reaches this path on one shared file system (or all run on "
                "this host), set journal.sqlite.shared: true."
            )
    elif kind == "postgres":
        if not options.get(RuntimeOptions.JOURNAL_POSTGRES_DSN):
            log.warning(
                "journal.postgres.dsn is not set: each TaskManager reads %s from its own environment "
                "(the client's is not passed to them)", POSTGRES_DSN_ENV,
            )
    elif kind == "memory":
        log.warning(
            "journal.store is 'memory' on a cluster: each worker keeps its journal in its own memory, "
            "so a failover or rescale repeats journaled calls. %s.", _USE_POSTGRES,
        )
