"""The keyword index reads every script: words of Cyrillic, Greek, accented Latin, Arabic, Hebrew
or Devanagari text are terms (they were dropped or cut at the first non-ASCII letter), spelled
variants that mean the same word match (composed or decomposed accents, case folding, full-width
forms, optional Arabic and Hebrew vowel marks), scripts without spaces are character n-grams, and
ASCII text is tokenized exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

from skald.store.bm25 import KeywordIndex
from skald.store.terms import tokenize


def every(labels: np.ndarray) -> np.ndarray:
    return np.ones(labels.size, dtype=bool)


def test_ascii_text_keeps_its_tokens() -> None:
    assert tokenize("Restarting ERR_AUTH_42 in v2.3.1 parse_config") == [
        "restart", "err_auth_42", "in", "v2.3.1", "parse_config", "err", "auth", "42", "v2", "3", "1", "pars",
        "config"]


@pytest.mark.parametrize(("text", "words"), [
    ("Перезапуск сервера завершился ошибкой", ["перезапуск", "сервера", "завершился", "ошибкой"]),
    ("Ο διακομιστής", ["ο", "διακομιστήσ"]),  # final sigma folded, as in the query
    ("हिन्दी सर्वर", ["हिन्दी", "सर्वर"]),  # vowel signs and the virama stay inside their word
    ("fermé à 18h", ["fermé", "à", "18h"]),
])
def test_words_of_other_alphabets_are_terms(text: str, words: list[str]) -> None:
    assert tokenize(text) == words


@pytest.mark.parametrize(("written", "asked"), [
    ("Le café est fermé", "cafe\u0301"),  # decomposed accent
    ("LE CAFÉ", "café"),
    ("Die Straße ist gesperrt", "STRASSE"),
    ("code ＥＲＲ＿４２", "err_42"),  # full-width forms
    ("الخادمُ يعمل", "الخادم"),  # Arabic vowel marks are optional
    ("שָׁלוֹם", "שלום"),  # so are Hebrew points
])
def test_spelling_variants_of_one_word_match(written: str, asked: str) -> None:
    kw = KeywordIndex()
    kw.add(1, written)
    kw.add(2, "nothing in common here")
    assert kw.search(asked, 5, every)[0].tolist() == [1]


def test_a_query_in_another_language_finds_its_row() -> None:
    kw = KeywordIndex()
    kw.add(1, "Сервер базы данных перезапускается каждую ночь в 03:00")
    kw.add(2, "The database server restarts every night at 03:00")
    kw.add(3, "Ο διακομιστής αρχείων κλείνει τα Σαββατοκύριακα")
    kw.add(4, "เซิร์ฟเวอร์ฐานข้อมูลรีสตาร์ททุกคืน")
    assert kw.search("перезапускается сервер", 5, every)[0].tolist()[0] == 1
    assert kw.search("διακομιστής αρχείων", 5, every)[0].tolist()[0] == 3
    assert kw.search("ฐานข้อมูล", 5, every)[0].tolist() == [4]  # no spaces: character n-grams


def test_scripts_without_spaces_are_unigrams_and_bigrams() -> None:
    assert tokenize("重启失败") == ["重", "启", "失", "败", "重启", "启失", "失败"]
    assert tokenize("東京タワー and Tokyo")[:2] == ["and", "tokyo"]


@pytest.mark.parametrize("text", [
    "Runbook › Restarts\nRestarting ERR_AUTH_42 in v2.3.1 … then parse_config",
    "Caroline’s “support group” — it was so powerful… «really» • node-7 · v2…3",
    "Deploy ‹staging› – see https://x.io/a-b:c … done",
])
def test_english_with_typographic_punctuation_reads_as_the_unicode_expressions_read_it(text: str) -> None:
    """A heading path's `›`, an ellipsis, dashes and curly quotes are separators either way: the
    ASCII expressions (with them as spaces) give the terms the Unicode ones give, which a letter
    beyond ASCII still sends the text to."""
    from collections import Counter

    from skald.store import terms

    fast = Counter(terms._written(text))
    assert Counter(terms._written(text + " é")) - Counter(["é"]) == fast
    assert terms._words(text)[0].isascii()  # the fast way was taken
