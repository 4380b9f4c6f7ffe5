"""The guide's text wrapped to a width: between words, and between any two Chinese characters.

Rich wraps only at spaces, and Chinese has few: a long run of characters jumped whole to the next line
and left the line before it half empty. Here every wide character is a place to break, except before
closing punctuation (，。、：；！？ and closing brackets and quotes), which stays with what it closes.
"""

from __future__ import annotations

from rich.cells import cell_len

from tui.render.fmt import fit

CLOSERS = frozenset("，。、：；！？）」』》〉”’…·%,.;:!?)]}")


def atoms(line: str) -> list[str]:
    """The line cut into unbreakable pieces; ' ' marks a space between two of them."""
    out: list[str] = []
    for ch in line:
        if ch.isspace():
            if out and out[-1] != " ":
                out.append(" ")
            continue
        last = out[-1] if out else " "
        if ch in CLOSERS and last != " ":
            out[-1] += ch  # never start a line with closing punctuation
        elif cell_len(ch) == 1 and last != " " and cell_len(last[-1]) == 1:
            out[-1] += ch  # a word (or a number such as 3,350 or 8.36) of narrow characters stays whole
        else:
            out.append(ch)
    return out


def wrap(lines: tuple[str, ...] | list[str], width: int) -> list[str]:
    """Each line wrapped to `width` cells, greedily; a piece wider than a line is cut."""
    if width <= 0:
        return []
    out: list[str] = []
    for line in lines:
        cur, cur_w, space = "", 0, False
        for a in atoms(line):
            if a == " ":
                space = bool(cur)
                continue
            w = cell_len(a)
            gap = 1 if space else 0
            if cur and cur_w + gap + w > width:
                out.append(cur)
                cur, cur_w, gap = "", 0, 0
            while w > width:  # longer than a whole line: cut it
                head = fit(a, width).rstrip(" ")
                out.append(head)
                a = a[len(head):]
                w = cell_len(a)
            cur += " " * gap + a
            cur_w += gap + w
            space = False
        out.append(cur)
    return out
