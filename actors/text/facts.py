"""Facts a deterministic extractor can find in a conversation, without a model (pure).

Two kinds, each keyed so a later archive merges into the same memory instead of adding one:

- **Preferences**: what the user says they like, love, enjoy, prefer, dislike or hate, and
  their favourites ("my favourite band is ..."), keyed by the topic (the object's first content
  words, or "favourite <thing>").
- **Entities**: proper names (capitalised words or runs of them, "Iron Man", "Spider-Man", "The
  Name of the Wind"; a possessive counted as its owner; not a speaker label, nor a sentence's
  capitalised first word unless the archive names it so elsewhere) mentioned at least twice in
  one archive, keyed by the name; the memory lists the sentences that mention it.

Every line carries the day it was said and the id of the message it came from, so a memory
read months later still says when and where. English only, and deliberately conservative: a
missed fact stays findable in the verbatim transcript; a wrong one would be noise in recall.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from skald.actors.text import dates
from skald.store.memory_history import same_fact

MAX_LINES = 40  # lines a keyed fact memory keeps (newest kept): one screen, one embedding window
LINE_CHARS = 300
MIN_MENTIONS = 2  # an entity named once in an archive is not worth a memory of its own

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_SPEAKER = re.compile(r"^\s*(?:\[[^\]]{1,40}\]\s*)?([A-Z][\w .'-]{0,40}):\s+")  # "[D1:3] Caroline: ", "Bob: "
_PREFER = re.compile(
    r"\bI(?:'m| am)?\s+(?:really\s+|absolutely\s+|totally\s+|also\s+|just\s+|still\s+|do\s+)?"
    r"(?:don't\s+|do not\s+|never\s+|really\s+)?"
    r"(love|like|enjoy|prefer|adore|hate|dislike|can't stand|cannot stand|am a (?:big )?fan of|'m a (?:big )?fan of)"
    r"\s+(.{2,120})", re.I)
_FAVOURITE = re.compile(
    r"\bmy\s+(?:all[- ]time\s+)?favou?rite\s+([a-z][a-z ]{1,30}?)\s+(?:is|are|was|has been)\s+(.{2,120})", re.I)
_WORD = r"[A-Z][a-z]+(?:-[A-Z][a-z]+)*(?:['\u2019][a-z]+)?"  # Caroline, Spider-Man, Charlotte's
_NAME = re.compile(rf"\b{_WORD}(?:\s+(?:of\s+the\s+|of\s+|the\s+|de\s+)?{_WORD}){{0,3}}\b")
_POSSESSIVE = re.compile(r"['\u2019]s?$")  # Oliver's -> Oliver; That's -> That (then not a name)
_STOP = frozenset("""
a an the and or but so to of in on at for with from by about as into over after before than then that this
these those it its it's i i'm i've i'd me my mine we our you your he him his she her they them their there here
what which who whom whose when where why how not no yes just also too very really some any all each every
is am are was were be been being do does did have has had will would can could should may might must
""".split())
# Capitalised words that are not names: sentence-ish openers, days and months (dates are already
# on every line), greetings and interjections.
_NOT_NAMES = frozenset("""
I I'm I've I'd I'll Hey Hi Hello Thanks Thank Yes No Yeah Wow Oh Ok Okay Sure Well Great Good Nice Cool Awesome
Congrats Congratulations Sorry Please Haha Lol Omg Aww Ah Hmm So And But Or Also Just Really Totally Absolutely
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August
September October November December Today Tomorrow Yesterday Tonight User Assistant The This That These Those
It It's My Your Our Their We You He She They What When Where Why How Who Which There Here Let Let's
Later Then Now Maybe Perhaps Still Anyway Actually Honestly Sometimes Last Next After Before Since Because If
While Once Both Either Neither Every Each Some Many Most Such Another Other Same Only Even Though Although
Mon Tue Wed Thu Fri Sat Sun Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec
""".split())


@dataclass(frozen=True, slots=True)
class Said:
    """One message as the extractor needs it."""

    id: str
    role: str
    text: str
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Fact:
    """A preference or entity stated in a conversation turn, found offline, with the line that cites it."""

    category: str  # "preferences" | "entities"
    key: str
    line: str  # "- 8 May 2023: user: I love hiking. (message m-12)"


def _line(s: Said, sentence: str) -> str:
    when = f"{dates.day(s.at)}: " if s.at else ""
    text = " ".join(sentence.split())[:LINE_CHARS]
    return f"- {when}{s.role}: {text} (message {s.id})"


# An object that opens a clause ("I love that you came", "I like how it turned out") is a reaction
# to the conversation, not a preference with a topic; so is one that is someone else's ("I love your
# turtles", "their work") or what was just shown or said ("I love the idea", "the colour").
_CLAUSE = frozenset("that it this those these how when what where why who seeing hearing knowing".split())
_OTHERS = frozenset("your their his her".split())
_REACTION = frozenset("""idea ideas thought thoughts sound look looks way color colors colour colours texture vibe
vibes energy picture pictures photo photos pic pics name fact feeling message advice support suggestion
detail details""".split())
# Words that fill a topic without saying what it is ("running my own studio" -> "running studio").
_FILLER = frozenset("own different new little whole various many lots lot kind kinds sort sorts type types one".split())
# "the things I love makes writing fun": the verb belongs to a relative clause, not the speaker.
_RELATIVE = re.compile(r"\b(?:things?|stuff|everything|ones)\s+$", re.I)


def _topic(obj: str) -> str:
    obj = re.split(r"[,;:(]|\s(?:and|but|because|so|when|if|since|as)\s", obj, maxsplit=1)[0]
    raw = re.findall(r"[a-z0-9][a-z0-9'-]*", obj.lower())
    if not raw or raw[0] in _CLAUSE or raw[0] in _OTHERS:
        return ""
    if raw[0] == "the" and len(raw) > 1 and raw[1] in _REACTION:
        return ""
    words = [w for w in raw if w not in _STOP and w not in _FILLER]
    return " ".join(words[:2])


def _sentences(text: str) -> list[str]:
    return [m.group(0).strip() for m in _SENTENCE.finditer(_SPEAKER.sub("", text, count=1)) if m.group(0).strip()]


def preferences(messages: list[Said]) -> list[Fact]:
    """The user's own likes, dislikes and favourites, one fact per sentence that states one."""
    out: list[Fact] = []
    for s in messages:
        if s.role != "user":
            continue  # an assistant's "I love that idea" is not the user's preference
        for sentence in _sentences(s.text):
            fav = _FAVOURITE.search(sentence)
            if fav:
                out.append(Fact("preferences", f"favourite {_topic(fav.group(1)) or fav.group(1).lower()}",
                                _line(s, sentence)))
                continue
            m = _PREFER.search(sentence)
            if m and not sentence.rstrip().endswith("?") and not _RELATIVE.search(sentence[:m.start()]):
                topic = _topic(m.group(2))
                if topic:
                    out.append(Fact("preferences", topic, _line(s, sentence)))
    return out


def _names(sentence: str) -> tuple[list[str], list[str]]:
    """The names a sentence holds past its first word, and the run of capitalised words that opens
    it (every sentence starts with a capital, so the caller decides what of it is a name). A
    possessive names its owner ("Oliver's" -> "Oliver")."""
    out: list[str] = []
    opening: list[str] = []
    for m in _NAME.finditer(sentence):
        words = [_POSSESSIVE.sub("", w) for w in m.group(0).split()]
        at_start = m.start() == 0
        while words and (words[0] in _NOT_NAMES or words[0].lower() in _STOP):
            words, at_start = words[1:], False
        if at_start:
            opening = words
        elif words:
            out.append(" ".join(words))
    return out, opening


def _opening_name(words: list[str], known: set[str]) -> list[str]:
    """What of a sentence's opening run is a name: the whole run where the archive names it so
    elsewhere ("Iron Man is ..."), else the run past its first word ("Glad Max is ..." -> "Max"),
    and a lone first word only where it is named elsewhere."""
    whole = " ".join(words)
    if whole in known:
        return [whole]
    return [" ".join(words[1:])] if len(words) > 1 else []


def entities(messages: list[Said]) -> list[Fact]:
    """Names mentioned at least MIN_MENTIONS times in these messages, each with the sentences
    that mention it. Speaker labels ("Caroline: ...") are not mentions."""
    found: list[tuple[Said, str, list[str], list[str]]] = []
    for s in messages:
        for sentence in _sentences(s.text):
            names, opening = _names(sentence)
            found.append((s, sentence, names, opening))
    known = {n for *_, names, _ in found for n in names}
    known |= {" ".join(o[1:]) for *_, o in found if len(o) > 1}  # "Glad Max ...": Max
    mentions: dict[str, list[tuple[Said, str]]] = {}
    for s, sentence, names, opening in found:
        for name in dict.fromkeys([*names, *_opening_name(opening, known)]):
            mentions.setdefault(name, []).append((s, sentence))
    # The speakers (a "Name: " label) address each other by name in every other line: a name the
    # conversation is between, not one it is about ("Jo" for Joanna too).
    speakers = {m.group(1).strip() for s in messages if (m := _SPEAKER.match(s.text))}
    out: list[Fact] = []
    for name, where in mentions.items():
        if len(where) < MIN_MENTIONS or any(sp == name or (len(name) >= 2 and sp.startswith(name)) for sp in speakers):
            continue
        out += [Fact("entities", name, _line(s, sentence)) for s, sentence in where]
    return out


def extract(messages: list[Said]) -> list[Fact]:
    return preferences(messages) + entities(messages)


def grouped(facts: list[Fact]) -> dict[tuple[str, str], list[str]]:
    """(category, key) -> lines, in the order found."""
    out: dict[tuple[str, str], list[str]] = {}
    for f in facts:
        lines = out.setdefault((f.category, f.key), [])
        if f.line not in lines:
            lines.append(f.line)
    return out


def title(category: str, key: str) -> str:
    return f"# {'Preference' if category == 'preferences' else 'Entity'}: {key}"


def merged(existing: str, category: str, key: str, lines: list[str]) -> str | None:
    """The memory's new text: its lines plus the new ones that are not near-duplicates of a line it
    holds (newest MAX_LINES kept), or None when nothing is new."""
    old = [ln for ln in existing.splitlines() if ln.startswith("- ")]
    new = [ln for ln in lines if not any(same_fact(_said(ln), _said(o)) for o in old)]
    if not new:
        return None
    body = (old + new)[-MAX_LINES:]
    return "\n".join([title(category, key), "", *body]) + "\n"


def _said(line: str) -> str:
    """A line's sentence without its date, speaker and message id (what makes two lines the same fact)."""
    text = re.sub(r"\s*\(message [^)]*\)\s*$", "", line)
    return re.sub(r"^- (?:[^:]{3,30}: )?(?:user|assistant|system|tool): ", "", text)
