"""Quiet Apache Beam's warning about the GCS filesystem it cannot load.

PyFlink runs Python operators on Beam's harness, and ``apache_beam.io.filesystems``
tries, when first imported, to load every optional filesystem. Where some
``google.cloud`` package is installed but not ``google-cloud-storage``, the
GCS one fails with ``ImportError: cannot import name 'storage' from
'google.cloud'`` (not ``ModuleNotFoundError``, which Beam skips silently), and
Beam logs a WARNING. A job here never reads ``gs://`` paths through Beam, and
the import happens while a job runs, so the line lands in the middle of a
command's progress bar. Only that warning is dropped: every other record of
that logger (another filesystem, a GCS client that is installed but broken)
still shows.
"""

from __future__ import annotations

import logging

__all__ = ["BEAM_FILESYSTEMS_LOGGER", "install_beam_gcs_warning_filter"]

BEAM_FILESYSTEMS_LOGGER = "apache_beam.io.filesystems"


class _MissingGcsClientFilter(logging.Filter):
    """Drops Beam's "Failed to import GCSFileSystem" record when its cause is
    the GCS client library not being installed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Failed to import GCSFileSystem"):
            return True
        cause = " ".join(str(arg) for arg in (record.args or ()))
        return not ("'storage'" in cause and "google.cloud" in cause)


def install_beam_gcs_warning_filter() -> None:
    """Attach the filter to Beam's filesystems logger (once per process).

    A logger filter applies to records that logger creates, so installing it
    before Beam is imported (the logger is created by name) is enough."""
    logger = logging.getLogger(BEAM_FILESYSTEMS_LOGGER)
    if not any(isinstance(f, _MissingGcsClientFilter) for f in logger.filters):
        logger.addFilter(_MissingGcsClientFilter())
