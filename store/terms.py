"""What a text's terms are, for the keyword index (`store/bm25.py`) and for saying which words of a
query a row holds: words of every script, stems in the row's language, a query's function words.

Tokens keep identifiers whole (`ERR_AUTH_42`, `parse_config`, `v2.3.1`) and also index their
parts, so both the exact code and its words match; plain words are stemmed (Snowball) in the
row's language (`store/language.py`), so `restarting` finds `restart` and `Datenbank` finds
`Datenbanken`. Words of other alphabets (Cyrillic, Greek, accented Latin, Arabic, Devanagari ...)
are read after NFKC normalisation and case folding (so `é`
composed or not, `Straße` and `STRASSE`, full-width `ＥＲＲ` and `err` match); scripts written
without spaces (Chinese, Japanese, Korean, Thai, Lao, Khmer, Myanmar) are indexed as character
unigrams and bigrams (no segmenter needed).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable

import regex
import snowballstemmer

from skald.store import language
from skald.store.language import DEFAULT

_STEMMER = snowballstemmer.stemmer("english")  # BSD; the Snowball project's own Python port
_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[.\-:/][A-Za-z0-9_]+)*")
_PARTS = re.compile(r"[A-Za-z0-9]+")
# Scripts written without spaces between words: kana, CJK ideographs, Hangul, Thai, Lao, Myanmar,
# Khmer. Indexed as character n-grams; every other letter, digit or mark is part of a word.
_RUNS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
_CJK = re.compile(f"[{_RUNS}]+")
# The same shapes as _TOKEN and _PARTS for text beyond ASCII: a word is letters, digits and marks
# (a Devanagari vowel sign or a combining accent stays inside its word), Unicode classes that
# `re` lacks; `regex` (Apache-2.0) is the maintained engine that has them.
_WORD = f"[[\\p{{L}}\\p{{N}}\\p{{M}}_]--[{_RUNS}]]"
_U_TOKEN = regex.compile(f"{_WORD}+(?:[.\\-:/]{_WORD}+)*", regex.V1)
_U_PARTS = regex.compile(f"[[\\p{{L}}\\p{{N}}\\p{{M}}]--[{_RUNS}]]+", regex.V1)
# Punctuation that ordinary English text has beyond ASCII (a section's heading path `A › B`, an
# ellipsis, dashes, curly quotes, bullets): none is part of a word or made one by NFKC, so a text
# whose only other characters are ASCII reads as the ASCII expressions read it with these as
# spaces: the same words, at a quarter of the Unicode expressions' cost. Every section row's
# text starts with its heading path, so every section of an English document took the slow way.
_AS_SPACES = "›‹…–—‘’“”•·«»"


def _spaced(text: str) -> str:
    """`text` with `_AS_SPACES` as spaces: a `replace` per character present (a C scan each), 1 us
    on a 900-character section where `str.translate`, a dict lookup per character, took 66 us,
    most of tokenising it."""
    for ch in _AS_SPACES:
        if ch in text:
            text = text.replace(ch, " ")
    return text


# Vowel points, cantillation and tatweel of Hebrew and Arabic: most text is written without them,
# so a word matches with or without (the usual normalisation of both languages' search).
_OPTIONAL_MARKS = re.compile("[\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"  # Hebrew (not its maqaf)
                             "\u0640\u064b-\u065f\u0670\u06d6-\u06ed]")  # Arabic


# Function words a query carries ("when did she ...") that say nothing about what it is about.
# Left out of a query's terms (never of the index, so a query of nothing else still matches).
# A short list on purpose: published lists (python-stop-words' English has 1,333 entries) hold
# content words such as "act", "added" or "10" that a technical search must keep. Words that are
# also names ("May", "will", "can", "US") stay terms.
_STOP = """
a an the and or but nor of to in on at by for with from into onto about as than then so if
is am are was were be been being do does did done doing have has had having would shall
should could might must i me my mine we our you your he him his she her it its they
them their this that these those there here what which who whom whose when where why how
not no yes just also too very any some all each both either neither other such own same
""".split()


Langs = tuple[str, ...]  # the languages an index's rows are written in (`KeywordIndex.languages`)
ENGLISH: Langs = (DEFAULT,)


@functools.lru_cache(maxsize=200_000)
def stem(word: str, lang: str = DEFAULT) -> str:
    """Snowball stem of a plain word in the row's language (`restarting` -> `restart`,
    `Datenbanken` -> `datenbank`); identifiers and numbers are left whole, since `v2.3.1` and
    `ERR_AUTH_42` must match exactly. English stems only ASCII words, as it always has."""
    if lang == DEFAULT:
        if not word.isalpha() or not word.isascii() or len(word) < 4:
            return word
        return _STEMMER.stemWord(word)
    stemmer = language.stemmer(lang)
    if stemmer is None or not word.isalpha() or len(word) < 3:
        return word
    return stemmer.stemWord(word)


def _words(text: str) -> tuple[str, list[str], Callable[[str], list[str]]]:
    """(the text as its words are read, its words as written, how an identifier splits)."""
    if text.isascii():
        return text, _TOKEN.findall(text.lower()), _PARTS.findall
    plain = _spaced(text)
    if plain.isascii():
        return plain, _TOKEN.findall(plain.lower()), _PARTS.findall
    text = _OPTIONAL_MARKS.sub("", unicodedata.normalize("NFKC", text).casefold())
    return text, _U_TOKEN.findall(text), _U_PARTS.findall


def _written(text: str) -> list[str]:
    """Every term of the text before stemming: its words, an identifier's parts, and the
    character unigrams and bigrams of a script written without spaces."""
    text, out, parts_of = _words(text)
    for tok in out[:]:
        if not tok.isalnum():  # an identifier with separators (or a word with marks): parts are terms too
            parts = parts_of(tok)
            if len(parts) > 1:
                out.extend(parts)
    if not text.isascii():
        for run in _CJK.findall(text):
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def tokenize(text: str, lang: str = DEFAULT) -> list[str]:
    """The text's terms, its words stemmed as words of `lang` (the row's language)."""
    if lang == DEFAULT:
        return [stem(w) for w in _written(text)]  # a one-argument key is the stem cache's fast path
    return [stem(w, lang) for w in _written(text)]


def _function_language(words: list[str], langs: Langs) -> str:
    """The language other than English whose function words the query uses most (at least two,
    and more than English's), "" when none: only then are that language's function words left
    out, so `war` stays in an English query over German rows."""
    best, most = "", max(1, sum(stem(w) in STOP_WORDS for w in words))
    for lang in langs:
        if lang != DEFAULT and (n := sum(w in language.function_words(lang) for w in words)) > most:
            best, most = lang, n
    return best


def _groups(written: list[str], langs: Langs) -> list[tuple[str, frozenset[str], bool]]:
    """(word, its terms under each language, whether it is a function word) for each distinct word."""
    words = list(dict.fromkeys(written))
    other = _function_language(words, langs) if len(langs) > 1 else ""
    skip = language.function_words(other) if other else frozenset()
    return [(w, frozenset(stem(w, lang) for lang in langs), stem(w) in STOP_WORDS or w in skip) for w in words]


@functools.lru_cache(maxsize=4096)
def query_groups(text: str, langs: Langs = ENGLISH) -> tuple[frozenset[str], ...]:
    """A query's terms, one set per word: the word's stem under each language the index holds,
    since a query is too short to tell its language. Function words aside (all words when it has
    nothing else). Cached: one query asks for them several times (search, coverage, novelty)."""
    groups = _groups(_written(text), langs)
    kept = [g for _, g, function in groups if not function] or [g for _, g, _ in groups]
    return tuple(dict.fromkeys(kept))


@functools.lru_cache(maxsize=4096)
def query_terms(text: str, langs: Langs = ENGLISH) -> frozenset[str]:
    """Every term of `query_groups`, as one set (what BM25 scores)."""
    return frozenset().union(*query_groups(text, langs))


@functools.lru_cache(maxsize=4096)
def query_words(text: str, langs: Langs = ENGLISH) -> tuple[tuple[str, frozenset[str]], ...]:
    """(word as the query writes it, lower-cased; its terms) for each distinct whole word of a
    query, function words aside as in `query_groups`: what a match reason names."""
    groups = _groups(_words(text)[1], langs)
    kept = [(w, g) for w, g, function in groups if not function]
    return tuple(kept or [(w, g) for w, g, _ in groups])


FUNCTION_WORDS = frozenset(_STOP)  # as written, lower-cased
STOP_WORDS = frozenset(stem(t) for w in _STOP for t in _written(w))  # as the tokenizer turns them ("does" -> "doe")
