"""The review jobs' input reader (``flink_agents.jobs.review_records.read_reviews``) and
output checks: a bad line is one bad record naming ``FILE:LINE`` and its
reason, fatal by default and skipped (logged, counted) on request; the lines
around it are read as usual. Also the job's command line refusing such input
(exit 2) on either runner before any job starts. The same cases through real
jobs on both runners: ``tests/e2e/test_review_job_e2e.py``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from flink_agents.jobs import review_analysis
from flink_agents.jobs.review_records import BadRecordError, check_output_path, jsonl_output, read_reviews

GOOD = [
    {"id": "B0GOOD0001", "review": "Works as described.", "ts": 1},
    {"id": "B0GOOD0002", "review": "Arrived late but fine.", "ts": 2},
]

# Each case: the raw bytes of line 2 (lines 1 and 3 are good), and the
# reason the reader must give for it.
_LATIN1 = b'{"id": "B0BAD00001", "review": "caf\xe9 \xff broken", "ts": 3}'
BAD_LINES = {
    "invalid_utf8": (_LATIN1, f"not valid UTF-8 (byte 0xe9 at byte {_LATIN1.index(0xE9) + 1} of the line)"),
    "nested_200000_deep": (
        b'{"id": "B0BAD00002", "review": ' + b"[" * 200_000 + b"]" * 200_000 + b', "ts": 3}',
        "not valid JSON (nested too deep",
    ),
    "lone_surrogate": (
        b'{"id": "B0BAD00003", "review": "half a pair \\ud800 here", "ts": 3}',
        "field 'review': lone surrogate '\\ud800' at character 13",
    ),
}


def _file_with(tmp_path: Path, bad_line: bytes) -> Path:
    path = tmp_path / "reviews.jsonl"
    good = [json.dumps(r).encode() for r in GOOD]
    path.write_bytes(b"\n".join([good[0], bad_line, good[1]]) + b"\n")
    return path


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_stops_the_read_naming_file_line_and_reason(tmp_path: Path, case: str) -> None:
    bad_line, reason = BAD_LINES[case]
    path = _file_with(tmp_path, bad_line)
    with pytest.raises(BadRecordError) as failure:
        read_reviews(path)
    assert str(failure.value).startswith(f"{path}:2: bad review record: {reason}")


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_is_skipped_logged_and_counted_on_request(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    bad_line, reason = BAD_LINES[case]
    path = _file_with(tmp_path, bad_line)
    with caplog.at_level(logging.WARNING, logger="flink_agents.jobs.review_records"):
        read = read_reviews(path, skip_bad_records=True)
    assert read.reviews == GOOD  # the lines around it are unaffected
    assert len(read.bad_lines) == 1
    assert read.bad_lines[0].startswith(f"{path}:2: bad review record: {reason}")
    assert [r.getMessage() for r in caplog.records] == [f"skipped {read.bad_lines[0]}"]


def test_every_bad_line_of_a_file_is_counted_once(tmp_path: Path) -> None:
    path = tmp_path / "reviews.jsonl"
    # A surrogate pair escape is one valid character, not a bad record.
    emoji = b'{"id": "B0EMOJI001", "review": "love it \\ud83d\\ude00", "ts": 4}'
    lines = [json.dumps(GOOD[0]).encode(), *(line for line, _ in BAD_LINES.values()), json.dumps(GOOD[1]).encode(), emoji]
    path.write_bytes(b"\n".join(lines) + b"\n")
    read = read_reviews(path, skip_bad_records=True)
    assert read.reviews == [*GOOD, {"id": "B0EMOJI001", "review": "love it \U0001F600", "ts": 4}]
    assert [line.split(": bad review record")[0] for line in read.bad_lines] == [f"{path}:{n}" for n in (2, 3, 4)]


def test_a_byte_order_mark_and_crlf_line_ends_are_not_bad_records(tmp_path: Path) -> None:
    path = tmp_path / "reviews.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(json.dumps(r).encode() for r in GOOD) + b"\r\n")
    assert read_reviews(path).reviews == GOOD


@pytest.mark.parametrize("runner", ["local", "flink"])
@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_the_job_exits_2_naming_the_line_before_running(
    tmp_path: Path, case: str, runner: str, capsys: pytest.CaptureFixture
) -> None:
    bad_line, reason = BAD_LINES[case]
    path = _file_with(tmp_path, bad_line)
    output = tmp_path / "out.jsonl"
    code = review_analysis.main(["--input", str(path), "--output", str(output), "--runner", runner])
    assert code == 2
    assert f"error: {path}:2: bad review record: {reason}" in capsys.readouterr().err
    assert not output.exists()


def test_an_output_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match=f"output {tmp_path} is a directory"):
        check_output_path(tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        check_output_path(tmp_path / "file" / "out.jsonl")
    check_output_path(tmp_path / "new" / "out.jsonl")  # created when written


def test_the_output_writer_refuses_a_directory_before_its_block_runs(tmp_path: Path) -> None:
    ran = []
    with pytest.raises(IsADirectoryError):
        with jsonl_output(tmp_path, total=1, desc="test"):
            ran.append(True)
    assert ran == []


@pytest.mark.parametrize("runner", ["local", "flink"])
def test_the_job_refuses_a_directory_output_before_reading_or_running(
    tmp_path: Path, runner: str, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "reviews.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    code = review_analysis.main(["--input", str(path), "--output", str(tmp_path), "--runner", runner])
    assert code == 2
    err = capsys.readouterr().err
    assert f"error: output {tmp_path} is a directory" in err
    assert "review-analysis (" not in err  # no progress bar: the job never started


@pytest.mark.parametrize("job", ["review_triage", "shipping_claims"])
def test_the_other_jobs_sharing_the_reader_refuse_bad_input_and_directory_outputs(
    tmp_path: Path, job: str, capsys: pytest.CaptureFixture
) -> None:
    import importlib

    main = importlib.import_module(f"flink_agents.jobs.{job}").main
    bad_line, reason = BAD_LINES["invalid_utf8"]
    path = _file_with(tmp_path, bad_line)
    output = tmp_path / "out.jsonl"
    assert main(["--input", str(path), "--output", str(output), "--runner", "local"]) == 2
    assert f"error: {path}:2: bad review record: {reason}" in capsys.readouterr().err
    path.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    assert main(["--input", str(path), "--output", str(tmp_path), "--runner", "local"]) == 2
    assert f"error: output {tmp_path} is a directory" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.parametrize("bad_line, reason", [
    (b'{"id": "B0\\udc00", "review": "fine", "ts": 3}', "field 'id': lone surrogate '\\udc00' at character 3"),
    (b'{"id": "B0BAD00004", "review": "fine", "ts": 3, "\\ud800": 1}',
     "a field name ('\\ud800'): lone surrogate '\\ud800' at character 1"),
    (b"[1, 2]", "the line is not a review object: Input should be a valid dictionary"),
])
def test_a_lone_surrogate_anywhere_is_named_as_such(tmp_path: Path, bad_line: bytes, reason: str) -> None:
    path = _file_with(tmp_path, bad_line)
    with pytest.raises(BadRecordError) as failure:
        read_reviews(path)
    assert str(failure.value).startswith(f"{path}:2: bad review record: {reason}")


def test_a_line_cut_short_is_named_at_the_column_where_it_ends(tmp_path: Path) -> None:
    cut = b'{"id": "B0BAD00004", "review": "cut short", "ts": 3'
    path = _file_with(tmp_path, cut)
    with pytest.raises(BadRecordError) as failure:
        read_reviews(path)
    # The column of the line's end, not column 1 of the line break after it.
    assert str(failure.value) == (
        f"{path}:2: bad review record: not valid JSON (Expecting ',' delimiter at column {len(cut) + 1})")


@pytest.mark.parametrize("option, value, reason", [
    ("--timeout-s", "-5", "must be a number of seconds above 0, not -5"),
    ("--timeout-s", "nan", "must be a number of seconds above 0, not nan"),
    ("--max-retries", "-2", "must be at least 0, not -2"),
])
def test_a_negative_timeout_or_retry_count_is_refused_before_the_job_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture, option: str, value: str, reason: str
) -> None:
    path = tmp_path / "reviews.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    with pytest.raises(SystemExit) as exit_:
        review_analysis.main(["--runner", "local", "--input", str(path), "--output", str(tmp_path / "out.jsonl"),
                              option, value])
    assert exit_.value.code == 2
    assert f"argument {option}: {reason}" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_blank_lines_are_ignored_and_counted_in_the_jobs_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "reviews.jsonl"
    path.write_bytes(b"\n" + json.dumps(GOOD[0]).encode() + b"\n  \r\n\n" + json.dumps(GOOD[1]).encode() + b"\n")
    read = read_reviews(path)
    assert read.reviews == GOOD and read.blank_lines == 3 and read.bad_lines == []
    assert read.skipped() == "0 bad record(s) skipped, 3 blank line(s) ignored"
    assert read_reviews(_file_with(tmp_path, json.dumps(GOOD[0]).encode())).skipped() == "0 bad record(s) skipped"
