"""What an embedder's noise is measured on, for embedders the project has no calibration for.

Queries about everyday subjects, against passages of the Python Language Reference (`pydoc_data`,
in the standard library) and lines about the other everyday subjects: no query is answered by any
of them, so each query's best hit is what the embedder gives text that does not answer (its
noise), near and far from the query's domain. `calibration.fit` puts that noise under the recall
floor. Neither the queries nor the lines are the no-answer test's (`bench/ranking.py`), which
stays a held-out check of the fit.
"""

from __future__ import annotations

import re

# Everyday subjects: questions, and a line someone might have said about the subject (in the
# register of a remembered conversation). A query's noise is its best hit among the reference
# passages and the other subjects' lines: text near its domain that does not answer it.
SUBJECTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("We took the dogs to the vet on Saturday and the cat hid under the bed all afternoon.",
     ("How often should I walk a young beagle", "What do I feed a rescued hedgehog",
      "Why does my cat knock things off the table", "How do I stop a puppy biting")),
    ("Our trip was lovely: three days on the coast, then a night train inland and a ferry back.",
     ("Which beaches near Lisbon are good for surfing", "Do I need a visa to visit Japan for two weeks",
      "What is the cheapest way to travel around Patagonia", "How early should I arrive for an international flight")),
    ("I have been going to the gym before work and my legs are still sore from Tuesday.",
     ("How many rest days a week when training for a half marathon", "Best stretches for lower back pain",
      "How do I start doing pull-ups", "Is cycling to work good exercise")),
    ("The kids were up early again, so we made pancakes and drove them to their grandparents.",
     ("How do I get a toddler to sleep through the night", "When do babies start teething",
      "Ideas for a ten year old's birthday party", "How much pocket money should a teenager get")),
    ("It poured all morning, then the sky cleared and the evening was warm and still.",
     ("Will it rain in Manchester this weekend", "Why are sunsets red",
      "How do hurricanes get their names", "What does a barometer measure")),
    ("She bought a new jacket in the sale and wants to return the boots that pinch.",
     ("Which colours go with a navy blazer", "How do I get a red wine stain out of a carpet",
      "How should a wool coat be stored over summer", "What shoes go with a linen suit")),
    ("We finally fixed the leaking gutter and the spare room still needs a second coat.",
     ("How do I repaint a kitchen cabinet", "How do I hang a heavy mirror on plasterboard",
      "What is the best way to insulate a loft", "Why do my windows fog up in winter")),
    ("He opened a bottle from the trip to Porto and we talked over coffee until midnight.",
     ("Which wine pairs with grilled salmon", "How long does an opened bottle of port keep",
      "How do I brew pour-over coffee", "What is the difference between a latte and a flat white")),
    ("A woodpecker has been visiting the feeder and the robins are back in the hedge.",
     ("How can I attract goldfinches to my garden", "When do swallows migrate south")),
    ("My aunt is teaching me to knit and my first hat came out far too big.",
     ("How do I cast on when knitting a scarf", "What size crochet hook for chunky yarn")),
    ("We walked the ridge trail, camped by the lake and caught nothing all weekend.",
     ("What should I pack for a three day hike", "How do I treat a blister on a long walk",
      "How do I choose a tent for winter camping", "What is the best bait for river trout")),
    ("She swears by a new moisturiser and says her skin has never been better.",
     ("Is retinol safe to use every night", "What SPF should I wear in winter")),
    ("We watched an old black and white film last night and argued about the ending.",
     ("Which films won best picture in the nineties", "Who directed the original Godzilla")),
    ("Game night ran late: he won at cards again and nobody finished the puzzle.",
     ("What are good board games for four players", "How do I get better at chess openings")),
    ("I have been sleeping badly since the clocks changed and nap on the train.",
     ("How many hours of sleep does an adult need", "Does caffeine after lunch affect sleep")),
    ("Her landscape painting won a prize at the village show this summer.",
     ("How do I paint clouds in watercolour", "Which acrylic paints are best for beginners")),
    ("My cousin is getting married in June and I am one of the ushers.",
     ("How much does a small wedding usually cost", "How do I write a best man speech")),
    ("We met the bank about the house and the paperwork took the whole afternoon.",
     ("Should I fix my mortgage rate for five years", "How does home contents insurance work")),
    ("He started the new job on Monday and already has a review with his manager.",
     ("How do I answer the biggest weakness interview question", "How do I ask for a pay rise")),
    ("She is learning Italian with an app and the boxes from the move are still in the hall.",
     ("What is the fastest way to learn Spanish vocabulary", "How do I pack fragile items when moving house")),
    ("I had a filling last week and my jaw ached for two days.",
     ("How often should I see the dentist", "Is flossing really necessary")),
    ("The Tuesday class is mostly breathing and holding poses, and I leave calmer.",
     ("What yoga poses help with posture", "How do I breathe during meditation")),
    ("He read us a few of his poems at the book club and everyone clapped.",
     ("Who wrote the poem The Waste Land", "What rhymes with orange")),
)
QUERIES = tuple(q for _, qs in SUBJECTS for q in qs)
LINES = tuple(line for line, _ in SUBJECTS)

PASSAGE_CHARS = 800
PASSAGES = 48


def passages(start: int = 0, stop: int | None = PASSAGES) -> list[str]:
    """The first characters of reference topics `start:stop` (by name), whitespace folded; the
    noise set reads the first `PASSAGES` (`LINES` are its other passages)."""
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics)[start:stop]:
        text = re.sub(r"\s+", " ", topics[name]).strip()
        if text:
            out.append(text[:PASSAGE_CHARS])
    return out


def noise_mask() -> list[list[bool]]:
    """Per query, which of `passages() + LINES` may be its noise: all but its own subject's line."""
    n = len(passages())
    out = []
    for k, (_, qs) in enumerate(SUBJECTS):
        for _ in qs:
            out.append([True] * n + [j != k for j in range(len(LINES))])
    return out
