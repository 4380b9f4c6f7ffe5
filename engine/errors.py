"""The one error type the CLI turns into a single stderr line and exit code 2."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: a preset that does not exist, a malformed file, a batch that does not fit."""


def suggest(name: str, choices: list[str]) -> str:
    """A ' (did you mean a, b?)' suffix naming the closest preset names, or a list of all of them."""
    import difflib  # for a bad name only: every command imports this module at start-up (issue 26)

    close = difflib.get_close_matches(name.lower(), choices, n=3, cutoff=0.4)
    if not close:
        close = [c for c in choices if name.lower() in c or c in name.lower()][:3]
    if close:
        return f" (did you mean {', '.join(close)}?)"
    return f" (known: {', '.join(sorted(choices))})"
