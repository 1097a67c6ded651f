"""Beam's "Failed to import GCSFileSystem" warning stays out of a job's
output (it landed inside the review job's progress bar); Beam's other
warnings still show."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from flink_agents.runtime.flink.beam_logging import BEAM_FILESYSTEMS_LOGGER, install_beam_gcs_warning_filter


def _beam_format(filesystem: str) -> str:
    """The message as apache_beam/io/filesystems.py logs it (name literal)."""
    return f"Failed to import {filesystem}; loading of this filesystem will be skipped. Error details: %s"


_NO_GCS_CLIENT = ImportError("cannot import name 'storage' from 'google.cloud' (unknown location)")


@pytest.fixture
def beam_records():
    install_beam_gcs_warning_filter()
    install_beam_gcs_warning_filter()   # idempotent: one filter
    logger = logging.getLogger(BEAM_FILESYSTEMS_LOGGER)
    assert len(logger.filters) == 1
    seen: list = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = _Keep(level=logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield logger, seen
    finally:
        logger.removeHandler(handler)


def test_the_missing_gcs_client_warning_is_dropped_and_others_are_kept(beam_records):
    logger, seen = beam_records
    logger.warning(_beam_format("GCSFileSystem"), _NO_GCS_CLIENT)
    logger.warning(_beam_format("S3FileSystem"), ImportError("cannot import name 'boto3'"))
    logger.warning(_beam_format("GCSFileSystem"), ImportError("libcrc32c is broken"))

    assert [m.split(";")[0] for m in seen] == ["Failed to import S3FileSystem", "Failed to import GCSFileSystem"]
    assert "libcrc32c" in seen[1]


def _beam_import_stderr(first: str) -> str:
    code = f"import logging; logging.basicConfig(); {first}import apache_beam.io.filesystems"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_flink_job_process_does_not_print_the_gcs_warning_when_beam_loads():
    # Reproduces only where a google.cloud package is installed without
    # google-cloud-storage (this venv: the frameworks extras).
    if "Failed to import GCSFileSystem" not in _beam_import_stderr(""):
        pytest.skip("Beam loads its GCS filesystem (or skips it silently) here")
    assert "GCSFileSystem" not in _beam_import_stderr("import flink_agents.runtime.flink.environment; ")
