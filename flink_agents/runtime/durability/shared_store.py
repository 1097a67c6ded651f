"""A journal store other jobs share: said once, at a job's start.

Every read, write and prune names its journal id, so jobs sharing a store
(one PostgreSQL schema, one SQLite file) never replay or prune each other's
runs (docs/durability.md, "Sharing a store"). What sharing cannot catch is
a mistake in who shares: two jobs given one ``job-identifier``, or a store
nobody meant to share. So a job whose store already holds finished runs of
other journal ids logs one warning line naming them, at most
``OTHER_JOURNALS_NAMED`` of them, with their count.
"""

from __future__ import annotations

import logging
from typing import List

from flink_agents.stores.journal import JournalStore

__all__ = ["OTHER_JOURNALS_COUNTED", "OTHER_JOURNALS_NAMED", "report_other_journals"]

log = logging.getLogger(__name__)

# How many other journal ids the warning names, and counts at most.
OTHER_JOURNALS_NAMED = 5
OTHER_JOURNALS_COUNTED = 1000


def report_other_journals(store: JournalStore, journal_id: str) -> List[str]:
    """Warn, in one line, if ``store`` holds finished runs of journal ids
    other than ``journal_id``. Best effort: a store that cannot be read is
    left to fail the job's first run.

    Returns:
        The other journal ids found, sorted (at most ``OTHER_JOURNALS_COUNTED``).
    """
    try:
        found = store.journal_ids(OTHER_JOURNALS_COUNTED + 1)
    except Exception as error:  # the first run's read reports a store that is really gone
        log.debug("could not list the journal ids of %r: %r", store, error)
        return []
    others = [other for other in found if other != journal_id][:OTHER_JOURNALS_COUNTED]
    if others:
        named = ", ".join(repr(other[:80]) for other in others[:OTHER_JOURNALS_NAMED])
        count = f"at least {len(others)}" if len(found) > OTHER_JOURNALS_COUNTED else str(len(others))
        more = f" and {len(others) - OTHER_JOURNALS_NAMED} more" if len(others) > OTHER_JOURNALS_NAMED else ""
        log.warning(
            "journal store %r also holds the journals of %s other job id(s): %s%s; this job (journal id %r) "
            "reads and prunes only its own (docs/durability.md, 'Sharing a store')",
            store, count, named, more, journal_id,
        )
    return others
