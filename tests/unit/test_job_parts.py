"""A job whose removals would not fit one work-queue message is queued in parts (pure)."""

from __future__ import annotations

import msgspec

from skald.actors.indexer.jobs import parts
from skald.messages.ingest import IngestJob

STREAM_MAX = 8 * 1024 * 1024  # the work stream's message limit


def big(rows: int, uri_len: int = 90) -> IngestJob:
    pad = "x" * max(0, uri_len - 40)
    return IngestJob(job_id="j", account="a", index_roots=("viking://resources/new",),
                     refresh_dirs=("viking://resources",),
                     remove_rows=tuple((f"viking://resources/old/{pad}/f{i}.md#s{i % 40}", 2) for i in range(rows)))


def test_a_small_job_is_queued_as_it_is() -> None:
    job = big(100)
    assert parts(job) == [job]


def test_a_directory_of_a_hundred_thousand_rows_fits_the_stream_in_parts() -> None:
    job = big(100_000)
    assert len(msgspec.json.encode(job)) > STREAM_MAX  # what one message could not carry
    got = parts(job)
    assert len(got) > 1 and all(len(msgspec.json.encode(p)) < STREAM_MAX for p in got)
    assert [r for p in got for r in p.remove_rows] != list(job.remove_rows)  # the first chunk rides last
    assert sorted(r for p in got for r in p.remove_rows) == sorted(job.remove_rows)  # each removal once
    last = got[-1]
    assert last.job_id == "j" and last.index_roots == job.index_roots and last.refresh_dirs == job.refresh_dirs
    assert all(p.job_id == f"j-{i}" and not p.index_roots and not p.refresh_dirs for i, p in enumerate(got[:-1], 1))


def test_long_uris_split_by_size_not_count() -> None:
    got = parts(big(3_000, uri_len=4000), max_bytes=1024 * 1024)
    assert len(got) >= 11 and all(len(msgspec.json.encode(p)) < 1.1 * 1024 * 1024 for p in got)
