"""The crash campaign's CI variant: 40 SIGKILL trials at random points across add_message, commit
Phase 1, Phase 2, memory merge, ingest, fs writes and moves, with a model that answers (bench/
crash_campaign.py runs 200 and more). Nothing acknowledged is lost, nothing is stored or
journaled twice, nothing is left pending, the index keeps no row of a file moved or removed."""

from __future__ import annotations

import os
from pathlib import Path

from support.crash_campaign import AREAS, campaign
from support.figures import FIGURES

TRIALS = 40  # every area is tried by the 21st trial of seed 7; a trial takes about 3 s on either store


async def test_forty_sigkills_across_every_write_path_lose_duplicate_and_strand_nothing(nats_url: str,
                                                                                      tmp_path: Path) -> None:
    seed = int(os.environ.get("SKALD_CRASH_SEED", "7"))
    t = await campaign(nats_url, tmp_path / "data", TRIALS, seed, prefix="campci", verbose=False)
    print(f"\ncrash campaign (seed {seed}): {t.line()}; by area {dict(t.by_area)}")
    assert t.trials == TRIALS and t.acked > 2 * TRIALS
    assert len(t.by_area) == len(AREAS)  # every area was tried
    assert (t.lost, t.duplicated, t.stuck, t.stale, t.unindexed) == ([], [], [], [], [])
    FIGURES["crash_points"] += t.trials


async def test_sigkills_against_the_jetstream_store_each_losing_the_disk_lose_nothing(nats_url: str,
                                                                                     tmp_path: Path) -> None:
    """The same campaign with `--store jetstream`, every worker on an empty disk of its own (a crash
    takes the disk with it): CI runs as many trials as on the local store;
    `bench/crash_campaign.py --store jetstream --trials 200` more."""
    seed = int(os.environ.get("SKALD_CRASH_SEED", "7"))
    t = await campaign(nats_url, tmp_path / "data", TRIALS, seed, prefix="campjs", verbose=False, store="jetstream")
    print(f"\ncrash campaign on jetstream (seed {seed}): {t.line()}; by area {dict(t.by_area)}")
    assert t.trials == TRIALS and t.acked > 2 * TRIALS
    assert len(t.by_area) == len(AREAS)  # every area was tried
    assert (t.lost, t.duplicated, t.stuck, t.stale, t.unindexed) == ([], [], [], [], [])
    FIGURES["crash_points"] += t.trials
