"""A row's words are stemmed in the row's own language: German, French, Spanish or Russian text
is found by another inflection of its words (before, only English words were stemmed), a query's
words are looked up under every indexed language's stems (a query is too short to identify), its
function words are left out in the language it uses them in, and an English-only index is
searched exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

from skald.store.bm25 import KeywordIndex
from skald.store.language import DEFAULT, language_of
from skald.store.terms import ENGLISH, query_groups, query_terms, tokenize

ROWS = {
    1: "Die Datenbanken wurden gestern Abend neu gestartet, weil der Speicher voll war.",
    2: "Les certificats des serveurs ont été renouvelés avant la migration.",
    3: "El servidor se reinicia cuando falta el archivo de configuración.",
    4: "Ошибка: сервер базы данных не отвечает после перезапуска.",
    5: "The database servers restarted last night after the memory filled up.",
}


def every(labels: np.ndarray) -> np.ndarray:
    return np.ones(labels.size, dtype=bool)


def index() -> KeywordIndex:
    kw = KeywordIndex()
    for label, text in ROWS.items():
        kw.add(label, text, language_of(text))
    return kw


@pytest.mark.parametrize(("label", "lang"), [(1, "de"), (2, "fr"), (3, "es"), (4, "ru"), (5, "en")])
def test_a_sentence_is_identified(label: int, lang: str) -> None:
    assert language_of(ROWS[label]) == lang


def test_english_under_a_heading_path_is_told_without_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A section's text starts with its heading path (`Runbook › Restarts`): its `›` does not send
    English prose to the model, while a German section under the same path still goes."""
    from skald.store import language

    asked: list[str] = []
    identify = language._identify
    monkeypatch.setattr(language, "_identify", lambda text: asked.append(text) or identify(text))
    assert language_of(f"Runbook › Restarts\n{ROWS[5]}") == "en" and not asked
    assert language_of(f"Runbook › Neustarts\n{ROWS[1]}") == "de" and len(asked) == 1


def test_a_documents_parts_ask_the_model_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from skald.store import language

    asked: list[str] = []
    identify = language._identify
    monkeypatch.setattr(language, "_identify", lambda text: asked.append(text) or identify(text))
    parts = [ROWS[1], "Kurz", ROWS[5], ROWS[1].replace("gestern", "heute"), ROWS[2]]
    assert language.languages_of_parts(parts) == ["de", DEFAULT, "en", "de", "de"]  # the French part: its document's
    assert len(asked) == 1
    assert language.languages_of_parts([ROWS[5], "ok"]) == ["en", DEFAULT] and len(asked) == 1


@pytest.mark.parametrize("text", ["Wow, cool!", "kubectl rollout restart deployment/api", "",
                                  "def parse(path): return yaml.safe_load(open(path))", "Servidor reiniciado"])
def test_too_short_or_unsure_is_english(text: str) -> None:
    assert language_of(text) == DEFAULT


@pytest.mark.parametrize(("query", "label"), [
    ("Datenbank", 1),  # Datenbanken
    ("Zertifikat renouvellement", 2),  # certificats / renouvelés: French stems, the German word absent
    ("servidores reiniciar", 3),  # servidor / reinicia
    ("перезапуск серверов", 4),  # перезапуска / сервер
    ("restarting databases", 5),
])
def test_another_inflection_finds_the_row(query: str, label: int) -> None:
    labels, _ = index().search(query, 3, every)
    assert labels.tolist() == [label]


def test_the_row_is_missed_when_stemmed_as_english() -> None:
    kw = KeywordIndex()
    kw.add(3, ROWS[3])  # the default: English stems, as before rows carried a language
    assert kw.search("reiniciar", 3, every)[0].size == 0  # English stems: reiniciar, reinicia
    assert index().search("reiniciar", 3, every)[0].tolist() == [3]  # Spanish: reinici, reinici


def test_languages_follow_the_rows() -> None:
    kw = index()
    assert kw.languages == ("en", "de", "es", "fr", "ru")
    kw.remove(1)
    kw.add(4, ROWS[5], "en")  # the Russian row rewritten in English
    assert kw.languages == ("en", "es", "fr")
    assert kw.search("Datenbank", 3, every)[0].size == 0


def test_an_english_only_index_queries_as_before() -> None:
    assert query_groups("When does Melanie paint a sunrise?") == (
        frozenset({"melani"}), frozenset({"paint"}), frozenset({"sunris"}))
    assert query_terms("restart restarting ERR_42", ENGLISH) == {"restart", "err_42", "err", "42"}
    assert tokenize("Restarting servers", "en") == tokenize("Restarting servers") == ["restart", "server"]


def test_function_words_in_the_language_the_query_uses_them() -> None:
    langs = ("en", "de")
    german = query_groups("Wann wurde die Datenbank gestartet", langs)
    assert frozenset({"datenbank"}) in german
    assert not any({"wann", "die"} & g for g in german)  # German function words, used as such
    # one German function word in an English query is a word: `war` is what this query is about
    assert frozenset({"war"}) in query_groups("war crimes", langs)
    assert frozenset({"die"}) in query_groups("why did the process die", langs)


def test_a_word_counts_once_whichever_stems_the_row_holds() -> None:
    kw = KeywordIndex()
    kw.add(1, "Datenbanken und Sicherungen der Datenbank laufen nachts", "de")
    kw.add(2, "the datenbanken table holds backups", "en")  # the word as written, English's term
    kw.add(3, "nothing to see here at all", "en")
    cov = kw.coverage("Datenbanken", [1, 2, 3])
    assert cov[0] == pytest.approx(1.0) and cov[1] == pytest.approx(1.0) and cov[2] == 0.0
    assert kw.words_in("Datenbanken backups", [1, 2]) == [["datenbanken"], ["datenbanken", "backups"]]
    assert kw.absent_share("Datenbanken") == 0.0
