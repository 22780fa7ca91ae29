"""Which language a row is written in, and what that language's stems and function words are: the
keyword index (`store/terms.py`, `store/bm25.py`) stems a row's words by its own language.

A row's language is identified once, when the indexer builds it (`language_of`), and travels on
the row. English is the default, and what a row too short or too mixed to tell is taken for: its
words keep the English stems they always had. Identification is py3langid (BSD-3-Clause, the
maintained fork of langid.py): on a sentence it is right (0.99+ on the test sentences), on a
two-word query it is not (`server restart` came out Norwegian), so a query is never identified:
each of its words is looked up under the stems of every language the index holds.

Stems are the Snowball project's (`snowballstemmer`, BSD); function words of languages other than
English are python-stop-words' lists (BSD-3-Clause), English's is `terms._STOP`.
"""

from __future__ import annotations

import functools
import re
import threading

import stop_words
from snowballstemmer import stemmer as snowball
from snowballstemmer.basestemmer import BaseStemmer

from skald.store import langid_model

DEFAULT = "en"
# The languages a row may be identified as: those Snowball stems, and a few more whose words are
# kept as written (no Snowball stemmer), so that their text is not forced into a wrong one.
_SNOWBALL = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "cs": "czech", "da": "danish",
    "nl": "dutch", "en": "english", "eo": "esperanto", "et": "estonian", "fi": "finnish", "fr": "french",
    "de": "german", "el": "greek", "hi": "hindi", "hu": "hungarian", "id": "indonesian", "ga": "irish",
    "it": "italian", "lt": "lithuanian", "ne": "nepali", "no": "norwegian", "fa": "persian",
    "pl": "polish", "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian",
    "es": "spanish", "sv": "swedish", "ta": "tamil", "tr": "turkish",
}
LANGUAGES = frozenset(_SNOWBALL) | {"bg", "uk", "he", "vi", "zh", "ja", "ko", "th"}
# Sure enough to stem a row other than as English (py3langid's normalised probability), and
# long enough to ask: below either, a row keeps English stems.
MIN_PROBABILITY = 0.9
MIN_WORDS = 4
SAMPLE_CHARS = 600  # identification reads a row's start (its cost is in proportion): a paragraph says as much as a book
# English text is known without the identifier by its function words (a fifth of the words of
# ordinary English prose, about none of a German, Spanish or code row's).
_EN_SHARE = 0.15
_EN_FUNCTION = frozenset("""
the a an and or but of to in on at by for with from is are was were be been has have had
it its this that these those i you he she we they my your his her our their not do does did
""".split())
_ASCII_WORD = re.compile(r"[a-z]+")
_ANY_WORD = re.compile(r"\w+")
_NON_ASCII_LETTER = re.compile(r"(?![\x00-\x7f])\w")

_identifier = None
_identifier_lock = threading.Lock()


def _identify(text: str) -> tuple[str, float]:
    """py3langid's (language, probability) among LANGUAGES; its model is read on first use, so a
    deployment of English rows never loads it, and from the machine's cache (`langid_model.py`:
    26-43 ms there, 0.5-0.7 s decompressed from the package)."""
    global _identifier
    if _identifier is None:
        with _identifier_lock:
            if _identifier is None:
                ident = langid_model.identifier()
                ident.set_languages(sorted(LANGUAGES))
                _identifier = ident
    lang, p = _identifier.classify(text)
    return str(lang), float(p)


def language_of(text: str) -> str:
    """The ISO 639-1 code of the language `text` is written in, or DEFAULT when it is too short or
    the identifier is unsure. English prose is told by its function words, without the model."""
    sample = text[:SAMPLE_CHARS]
    told = _told_without_model(sample)
    return told if told is not None else _asked(sample)


def languages_of_parts(texts: list[str]) -> list[str]:
    """`language_of` each part of one document (its sections, its table of contents), the model
    asked once: the parts only the model can tell take the language of the first of them long
    enough to say (a document is written in one language far more often than not), while English
    prose and parts too short to tell are known as `language_of` knows them. Asking the model of
    every section was a sixth of a long document's ingest where its sections are not English
    prose. A part in another language than its document's is stemmed as its document's and its
    words still match: a query's words are looked up under the stems of every language the index
    holds."""
    samples = [t[:SAMPLE_CHARS] for t in texts]
    told = [_told_without_model(s) for s in samples]
    asked = [s for s, t in zip(samples, told, strict=True) if t is None]
    if not asked:
        return [t or DEFAULT for t in told]
    whole = _asked(next((s for s in asked if len(s) >= SAMPLE_CHARS // 3), asked[0]))
    return [whole if t is None else t for t in told]


def _asked(sample: str) -> str:
    """The model's language for the sample, DEFAULT when it is unsure or names one not kept."""
    lang, p = _identify(sample)
    return lang if p >= MIN_PROBABILITY and lang in LANGUAGES else DEFAULT


def _told_without_model(sample: str) -> str | None:
    """DEFAULT for English prose (its function words; its letters all ASCII, whatever its marks:
    a section's heading path has `›`) and for a sample too short to tell; None when only the
    model can say."""
    if sample.isascii() or not _NON_ASCII_LETTER.search(sample):  # a section's path: `Runbook › Notes`
        words = _ASCII_WORD.findall(sample.lower())
        if len(words) < MIN_WORDS:
            return DEFAULT
        english = sum(w in _EN_FUNCTION for w in words)
        if english >= 2 and english >= _EN_SHARE * len(words):
            return DEFAULT
    elif len(_ANY_WORD.findall(sample)) < MIN_WORDS and not _has_unspaced(sample):
        return DEFAULT
    return None


def _has_unspaced(text: str) -> bool:
    """Chinese, Japanese, Korean or Thai: a sentence may be one 'word' to `\\w+`."""
    return any("\u3040" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7af" or "\u0e00" <= c <= "\u0e7f" for c in text)


@functools.cache
def stemmer(lang: str) -> BaseStemmer | None:
    """Snowball's stemmer for the language, None for one whose words are kept as written."""
    name = _SNOWBALL.get(lang)
    return snowball(name) if name else None


@functools.cache
def function_words(lang: str) -> frozenset[str]:
    """The language's function words as python-stop-words lists them (case-folded), empty when it
    has no list. Not English's: that list (1,333 words) holds content words a search must keep."""
    if lang == DEFAULT:
        return frozenset()
    try:
        return frozenset(w.casefold() for w in stop_words.get_stop_words(lang))
    except stop_words.StopWordError:
        return frozenset()
