"""py3langid's model read from the machine's cache (store/langid_model.py): the same answers as the
package's own model, written once, and written again when what is there does not read back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from skald.store import langid_model

SENTENCES = ["Der Server wird jeden Abend neu gestartet, damit die Protokolle nicht volllaufen.",
             "Le serveur redémarre chaque soir pour que les journaux ne débordent pas.",
             "El servidor se reinicia cada noche para que los registros no se llenen.",
             "Сервер перезапускается каждую ночь, чтобы журналы не переполнялись.",
             "The server restarts every night so the logs never fill the disk.",
             "Serwer jest uruchamiany ponownie każdej nocy."]
LANGS = ["de", "en", "es", "fr", "pl", "ru"]


def test_the_cached_model_answers_as_the_packages_and_is_written_once(tmp_path: Path) -> None:
    own = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    first = langid_model.identifier(tmp_path)
    written = [p for p in tmp_path.iterdir()]
    assert len(written) == 1 and written[0].is_dir() and not written[0].name.startswith(".")
    stamp = {p.name: p.stat().st_mtime_ns for p in written[0].iterdir()}
    again = langid_model.identifier(tmp_path)  # read, not written
    assert {p.name: p.stat().st_mtime_ns for p in written[0].iterdir()} == stamp
    assert isinstance(again.nb_ptc, np.memmap)  # the feature table and the automaton mapped, shared by a host's workers
    assert isinstance(again.tk_nextmove, memoryview) and isinstance(again.tk_nextmove.obj, np.memmap)
    for ident in (own, first, again):
        ident.set_languages(LANGS)
    for s in SENTENCES:
        assert first.classify(s) == again.classify(s) == own.classify(s)
        assert again.rank(s)[:3] == own.rank(s)[:3]


def test_a_cache_that_does_not_read_back_is_written_again_and_a_dead_writers_directory_goes(tmp_path: Path) -> None:
    langid_model.identifier(tmp_path)
    where = next(tmp_path.iterdir())
    (where / "nextmove.npy").write_bytes(b"")  # a disk that lost the file's content
    writer = subprocess.Popen(["true"])  # a writer killed mid-write: its pid is no process's now
    writer.wait()
    abandoned = tmp_path / f".{where.name}.{writer.pid}"
    abandoned.mkdir()
    (abandoned / "ptc.npy").write_bytes(b"half written")
    ident = langid_model.identifier(tmp_path)
    ident.set_languages(LANGS)
    assert ident.classify(SENTENCES[0])[0] == "de"
    assert (where / "nextmove.npy").stat().st_size > 1_000_000
    assert [p.name for p in tmp_path.iterdir()] == [where.name]  # no temporary directory left, the dead one's neither


def test_an_unwritable_cache_still_identifies(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory would be")
    ident = langid_model.identifier(blocked)
    ident.set_languages(LANGS)
    assert ident.classify(SENTENCES[1])[0] == "fr"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]
