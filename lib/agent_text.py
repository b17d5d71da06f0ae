"""What Reviewer does with text an agent wrote before a person reads it.

Agent text is hostile. Escaping stops markup; it does not stop Unicode from changing what a reviewer
reads: a right-to-left override (U+202E) makes "…00<RLO>1234" display as "…00 4321" and reverses
Reviewer's own words next to it, zero-width characters hide inside names, and a Cyrillic "а" in
"pаypal.com" looks Latin. So every place that shows agent text uses this module:

- `pieces()` splits a value into plain runs and the hidden characters between them (format and control
  characters: bidi overrides, embeddings and isolates, marks, zero-width characters, fillers), which
  the page shows as visible badges ("U+202E") instead of letting them act;
- `warnings()` says, in words, what is wrong with a value: hidden characters, and words that mix
  letters of several scripts (a look-alike domain, recipient or account name);
- `visible()` is the plain-text form (hidden characters as "[U+202E]") for the PDF, `__str__` and logs;
- `warnings_in()` walks a JSON value (the envelope of an evidence packet) and lists the warnings by path.

The HTML form is the template filter `agent_text` (approvals/templatetags/agent_text.py), which also
isolates the value in `<bdi>` so even allowed right-to-left text cannot reorder what surrounds it.
Pure Python (no Django): approvals and audit both import it.
"""

import unicodedata
from dataclasses import dataclass

# Characters in these categories have no glyph, or steer layout: format (Cf: bidi controls, zero-width
# joiners, the BOM, tags), control (Cc), line and paragraph separators, private use.
HIDDEN_CATEGORIES = {"Cf", "Cc", "Zl", "Zp", "Co"}
# Visible whitespace layout a reviewer expects in longer text.
ORDINARY_CONTROLS = {"\n", "\t", "\r"}
# Letters that render as blank space (Hangul fillers, the combining grapheme joiner).
BLANK_LETTERS = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u034f"}
# Scripts that are written together in one word (Japanese mixes kanji and kana).
COMPATIBLE_SCRIPTS = [{"CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA"}]


@dataclass(frozen=True)
class Piece:
    text: str
    hidden: bool = False

    @property
    def code(self) -> str:
        return f"U+{ord(self.text):04X}" if self.hidden else ""

    @property
    def name(self) -> str:
        return unicodedata.name(self.text, "unnamed character") if self.hidden else ""


def is_hidden(char: str) -> bool:
    if char in ORDINARY_CONTROLS:
        return False
    return unicodedata.category(char) in HIDDEN_CATEGORIES or char in BLANK_LETTERS


def pieces(value: str) -> list[Piece]:
    """The value as runs of plain text and single hidden characters, in order."""
    result: list[Piece] = []
    run: list[str] = []
    for char in value:
        if is_hidden(char):
            if run:
                result.append(Piece("".join(run)))
                run = []
            result.append(Piece(char, hidden=True))
        else:
            run.append(char)
    if run:
        result.append(Piece("".join(run)))
    return result


def json_escaped(text: str) -> str:
    """JSON text with every hidden character written as its escape (\\u202e; a pair of surrogate escapes
    beyond U+FFFF): the same JSON value, which no viewer can show reordered or hidden. Only for JSON
    text, where such a character can stand only inside a string."""
    out = []
    for char in text:
        if not is_hidden(char):
            out.append(char)
        elif ord(char) > 0xFFFF:
            high, low = divmod(ord(char) - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}")
        else:
            out.append(f"\\u{ord(char):04x}")
    return "".join(out)


def visible(value: str) -> str:
    """Plain text with every hidden character written out as [U+XXXX]."""
    return "".join(f"[{piece.code}]" if piece.hidden else piece.text for piece in pieces(value))


def _script(char: str) -> str | None:
    """The script of a letter, from its Unicode name ("CYRILLIC SMALL LETTER A" -> CYRILLIC); None for
    anything that is not a letter. Fullwidth and mathematical letters count as scripts of their own:
    mixed with plain Latin they are look-alikes too."""
    if not unicodedata.category(char).startswith("L"):
        return None
    return unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]


def mixed_script_words(value: str) -> list[tuple[str, list[str]]]:
    """Words (split on whitespace) whose letters come from more than one script, with the scripts."""
    found = []
    for word in value.split():
        scripts = sorted({script for char in word if (script := _script(char))})
        if len(scripts) > 1 and not any(set(scripts) <= allowed for allowed in COMPATIBLE_SCRIPTS):
            found.append((word, scripts))
    return found


def warnings(value: str) -> list[str]:
    """What a reviewer must be told about this value, in words (empty when nothing is wrong)."""
    found = []
    hidden = [piece for piece in pieces(value) if piece.hidden]
    if hidden:
        codes = ", ".join(dict.fromkeys(f"{piece.code} {piece.name}" for piece in hidden))
        found.append(
            f"{len(hidden)} hidden or text-direction character{'s' if len(hidden) > 1 else ''}, "
            f"shown as marked codes: {codes}"
        )
    for word, scripts in mixed_script_words(value):
        named = " and ".join(script.title() for script in scripts)
        found.append(f"“{visible(word)}” mixes {named} letters in one word: a look-alike?")
    return found


def warnings_in(value, path: str = "") -> dict[str, list[str]]:
    """Warnings for every string (keys included) inside a JSON value, by dotted path."""
    found: dict[str, list[str]] = {}
    stack = [(value, path)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if notes := warnings(value):
                found[path] = notes
        elif isinstance(value, dict):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                if notes := warnings(str(key)):
                    found[f"{child} (key)"] = notes
                stack.append((item, child))
        elif isinstance(value, list):
            stack.extend((item, f"{path}.{index}") for index, item in enumerate(value))
    return dict(sorted(found.items()))
