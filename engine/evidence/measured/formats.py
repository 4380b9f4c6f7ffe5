"""The registry of result and trace formats: a format is one class (name, detect, read) and one line in FORMATS.

A file is parsed once into a Doc (JSON, JSON lines or CSV, by its content); each format says whether the
Doc has its shape, and exactly one must (or the user names it with --format): a file of no known shape or
of two is one InputError, never a guess.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from engine import validation as V
from engine.errors import InputError, suggest
from engine.evidence.measured import results, traces
from engine.evidence.measured.doc import Doc, Format
from engine.evidence.measured.record import Measured


def parse(path: str | Path) -> Doc:
    """Read a file as JSON, JSON lines or CSV (decided by its content, not its name)."""
    label = str(path)
    text = V.read_text(Path(path), "result file")
    body = text.lstrip()
    if not body:
        raise InputError(f"{label}: the file is empty")
    if body[0] in "[{":
        V.check_json_depth(body, label)  # the validation layer's bound, before json recurses into it
        try:
            return Doc(label, "json", json.loads(body))
        except json.JSONDecodeError:
            pass
        except ValueError as e:  # an integer over Python's 4,300-digit limit
            raise InputError(f"{label}: unreadable JSON: {str(e).split(';')[0]}") from None
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InputError(f"{label}:{n}: not valid JSON: {e.msg}") from None
                except ValueError as e:
                    raise InputError(f"{label}:{n}: unreadable JSON: {str(e).split(';')[0]}") from None
        if not all(isinstance(r, dict) for r in rows):
            raise InputError(f"{label}: JSON lines must each be an object")
        return Doc(label, "jsonl", rows)
    return Doc(label, "csv", list(csv.DictReader(io.StringIO(text))))


def formats() -> dict[str, Format]:
    """Every known format by name: a new format is one class (results.py or traces.py) and one entry here."""
    return {f.name: f for f in (results.VllmBench(), results.GuideLLM(), results.AIPerf(), results.InferencePerf(),
                                traces.Mooncake(), traces.BurstGPT())}


def read_result(path: str | Path, fmt: str | None = None) -> Measured:
    """The file as a Measured: in the format named, else the one format whose shape it has."""
    known = formats()
    if fmt is not None and fmt not in known:
        raise InputError(f"--format {fmt}: unknown format{suggest(fmt, sorted(known))}")
    doc = parse(path)
    if fmt is not None:
        if not known[fmt].detect(doc):
            raise InputError(f"{doc.label}: --format {fmt}: the file does not have the shape of {known[fmt].title}")
        return known[fmt].read(doc)
    hits = [f for f in known.values() if f.detect(doc)]
    if not hits:
        raise InputError(f"{doc.label}: not a result or trace format tokensim knows ({', '.join(known)}); name it "
                         "with --format if it is one of them")
    if len(hits) > 1:
        raise InputError(f"{doc.label}: has the shape of {' and '.join(f.name for f in hits)}; name one with --format")
    return hits[0].read(doc)
