"""Read-only inspection of a journal store: the runs it holds, one run's
steps, its callbacks (``flink-agents runs|callbacks list``, ``runs show``).

    reader.open_reader(journal)      a SQLite path or a postgresql:// DSN, opened read-only
    runs.list_runs(reader, ...)      one summary per record run
    runs.show_run(reader, ...)       one run's steps, decoded and redacted
    runs.list_callbacks(reader, ...) callbacks without their capabilities
    approvals.list_approvals(journal, ...)   tool calls waiting for a reviewer
    approvals.decide(journal, id, approve)   approve or reject one (writes the store)

Everything read back is untrusted data: payloads are decoded to plain JSON
(``codec.plain_json`` through ``progress.records_of``), never into the
classes a row names.
"""

from flink_agents.inspection.approvals import decide, list_approvals
from flink_agents.inspection.reader import JournalReader, open_reader
from flink_agents.inspection.runs import STATES, list_callbacks, list_runs, show_run

__all__ = [
    "JournalReader", "STATES", "decide", "list_approvals", "list_callbacks", "list_runs", "open_reader", "show_run",
]
