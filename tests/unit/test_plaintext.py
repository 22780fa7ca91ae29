"""Headings of plain-text files: the conventions manuals and specs use, and what only looks like one."""

from skald.actors.text import formats, plaintext, sections

PARA = "This paragraph explains the part above it in two lines\nof ordinary prose, as a manual would.\n"


def test_underlined_title_and_sections_take_levels_in_order_of_appearance() -> None:
    text = f"TRIGGERS\n========\n\nIntroduction\n------------\n\n{PARA}\nConcepts\n--------\n\n{PARA}"
    assert plaintext.headings(text) == ((0, 1, "TRIGGERS"), (3, 2, "Introduction"), (9, 2, "Concepts"))
    doc = formats.convert("spec.txt", text.encode())
    assert doc.title == "TRIGGERS" and doc.format == "text"


def test_numbered_sections_nest_by_depth_and_a_parent_needs_no_body() -> None:
    text = f"1.  Introduction\n\n{PARA}\n2.  Protocol\n\n2.1.  Framing\n\n{PARA}\n2.2.  Errors\n\n{PARA}"
    assert plaintext.headings(text) == ((0, 1, "1. Introduction"), (5, 1, "2. Protocol"),
                                        (7, 2, "2.1. Framing"), (12, 2, "2.2. Errors"))
    assert plaintext.title(text, plaintext.headings(text)) == "1. Introduction"


def test_roman_numerals_and_lettered_parts() -> None:
    text = (f"I. Introduction\n\n{PARA}\nII. Structures\n\nConfiguration\n\n{PARA}\n"
            f"A. Changing the header\n\n{PARA}\nC. Configuration by the user\n\n{PARA}")
    got = [(lvl, t) for _, lvl, t in plaintext.headings(text)]
    # "I." beside "II." is a number; "C." beside "A." is a letter, not a hundred.
    assert got == [(1, "I. Introduction"), (1, "II. Structures"), (2, "Configuration"),
                   (3, "A. Changing the header"), (3, "C. Configuration by the user")]


def test_a_help_files_rules_and_link_targets() -> None:
    rule = "=" * 78
    text = (f"Patterns and search commands\t\t\t*pattern-searches*\n\n{PARA}\n{rule}\n"
            f"1. Search commands\t\t\t\t*search-commands*\n\n{PARA}\n{rule}\n"
            f"2. The definition of a pattern\t\t*search-pattern* *pattern*\n\t\t\t\t\t*regexp*\n\n{PARA}")
    assert [t for _, _, t in plaintext.headings(text)] == [
        "Patterns and search commands", "1. Search commands", "2. The definition of a pattern"]


def test_what_only_looks_like_a_heading() -> None:
    lists = "1. Install it\n\n2. Run it\n\n3. Stop it\n\n"  # items with no text of their own
    table = "Capability\t\tin Vim\t\tin Perl\n" + "-" * 40 + "\nignore case\t\t\\c\t\t(?i)\n\n"
    sentence = f"{PARA}\nThis line ends as a sentence does.\n\n{PARA}"
    lead_in = f"Choices for the mode are\n\n    PNG_ALPHA_PNG\n    PNG_ALPHA_STANDARD\n\n{PARA}"
    shell = f"{PARA}\n#\tSame as the star, but search backward\n{PARA}# a comment right under text\n"
    code = f"```\nOverview\n\n{PARA}```\n"
    bullets = f"* Pc - connector punctuation\n\n{PARA}"
    dash = f"{PARA}\nIf it is—\n\n{PARA}"  # a clause that runs on into the next paragraph
    for text in (lists, table, sentence, lead_in, code, bullets, dash):
        assert plaintext.headings(text) == (), text
    assert plaintext.headings(shell) == ()  # a tab after `#`, and no blank line before
    over_list = "Steps\n\n1. Install it\n\n2. Run it\n\n3. Stop it\n"
    assert plaintext.headings(over_list) == ((0, 1, "Steps"),)  # a title over the list


def test_a_manual_pages_headings_sit_outdented_over_their_text() -> None:
    body = "       Bash is a command language interpreter that executes commands\n       read from a file.\n"
    text = ("BASH(1)                     General Commands Manual                    BASH(1)\n\n"
            "NAME\n       bash - GNU Bourne-Again SHell\n\nDESCRIPTION\n" + body +
            "\nSHELL GRAMMAR\n" + body + "\n   Simple Commands\n" + body + "\n   Pipelines\n" + body +
            "\nThen call\n    png_read_info(png_ptr, info_ptr);\n    png_read_update_info(png_ptr);\n")
    assert [(lvl, t) for _, lvl, t in plaintext.headings(text)] == [
        (1, "NAME"), (1, "DESCRIPTION"), (1, "SHELL GRAMMAR"), (2, "Simple Commands"), (2, "Pipelines")]


def test_markdown_headings_in_a_text_file_still_count() -> None:
    text = f"# Notes\n\n{PARA}\n## Next steps\n\n{PARA}"
    assert plaintext.headings(text) == ((0, 1, "Notes"), (5, 2, "Next steps"))


def test_a_long_text_file_is_cut_at_its_headings_with_their_anchors() -> None:
    body = "\n".join(f"Line {i} of the part about framing, with enough words to fill it." for i in range(40))
    text = f"Wire protocol\n=============\n\n1. Framing\n\n{body}\n\n2. Errors\n\n{body}\n"
    doc = formats.convert("proto.txt", text.encode())
    anchors = [s.anchor for s in sections.split(doc, "proto.txt")]
    assert anchors[0] in ("wire-protocol", "1-framing") and "2-errors" in anchors
    assert all(not a.startswith("part") for a in anchors)
    titles = [s.title for s in sections.split(doc, "proto.txt")]
    assert any(t.startswith("Wire protocol › 2. Errors") for t in titles)


def test_a_headless_text_is_cut_into_numbered_parts() -> None:
    body = "\n\n".join(f"paragraph {i} " + "word " * 60 for i in range(30))
    doc = formats.convert("notes.txt", body.encode())
    assert doc.headings == ()
    anchors = [s.anchor for s in sections.split(doc, "notes.txt")]
    assert anchors[:3] == ["part", "part2", "part3"]
