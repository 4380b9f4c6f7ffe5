"""Scheduling policies: how many prompt tokens each prefilling row and each waiting request gets in a step.

The lane does what every policy shares (decode rows add one token each, preempt the newest under KV
pressure, admit preempted requests first and then the queue in order, never more than the free blocks
and batch slots allow); a policy decides only the token budget. A new policy is a new subclass added to
POLICIES; the lane never names one.

Two properties the lane relies on: admit_chunks is a prefix computation (a candidate's answer depends only on
the candidates ahead of it, so the first in line decides whether anyone joins), and admission is monotone in
the free blocks (fewer free blocks never admit more), so a policy that admits nothing keeps admitting nothing
while only decodes run, and those steps can be skipped together.
"""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np


class Scheduler:
    """A batching policy with its knobs: the most sequences in a step and the step's token budget."""

    name: ClassVar[str] = ""
    # admit_chunks hands every candidate its whole target (a prompt is never split): a request joining from the
    # queue then reads its whole prompt in the step it joins, which the lane prices on a shorter path. A policy
    # opts in; one that leaves it False is checked chunk by chunk.
    whole_prompts: ClassVar[bool] = False

    def __init__(self, max_batch: int, max_batched_tokens: int) -> None:
        self.max_batch = max_batch
        self.mbt = max_batched_tokens

    def admits_while_running(self) -> bool:
        """Whether requests may join a batch that is already running."""
        return True

    def prefill_chunks(self, remaining: np.ndarray, decodes: int) -> np.ndarray:
        """Prompt tokens each running, still-prefilling row reads this step (`remaining` each, oldest first)."""
        return remaining

    def admit_chunks(self, target: np.ndarray, tokens_planned: int, prefill_planned: bool) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
        """For the candidates in admission order (`target` tokens to prefill each): the tokens each would read
        this step, and which fit the token budget (the lane admits the leading run that also fits the pool)."""
        raise NotImplementedError

    def admit_one(self, target: int, tokens_planned: int, prefill_planned: bool) -> tuple[int, bool]:
        """admit_chunks for one candidate as plain ints: (its chunk, whether it fits the budget). A lone queued
        request is the usual admission, and numpy's calls on a 1-row array cost more than the rule; a policy
        may write its rule out on ints (the same integer arithmetic), else this asks admit_few."""
        return self.admit_few([target], tokens_planned, prefill_planned)[0]

    def admit_few(self, targets: list[int], tokens_planned: int, prefill_planned: bool) -> list[tuple[int, bool]]:
        """admit_chunks for a few candidates as plain ints: each one's (chunk, fits the budget), in order. A policy
        may write its rule out on ints (tests/engine/test_scheduler.py checks it against admit_chunks), else this
        asks admit_chunks."""
        chunk, ok = self.admit_chunks(np.array(targets, dtype=np.int64), tokens_planned, prefill_planned)
        return list(zip(chunk.tolist(), ok.tolist(), strict=True))


class Static(Scheduler):
    """A batch forms, runs until every request in it finishes, then the next one forms (no joins mid-run)."""

    name = "static"
    whole_prompts = True

    def admits_while_running(self) -> bool:
        return False

    def admit_chunks(self, target: np.ndarray, tokens_planned: int, prefill_planned: bool) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
        # A static batch reads every prompt in one step, whatever the token budget.
        return target, np.ones(len(target), dtype=bool)

    def admit_one(self, target: int, tokens_planned: int, prefill_planned: bool) -> tuple[int, bool]:
        return target, True

    def admit_few(self, targets: list[int], tokens_planned: int, prefill_planned: bool) -> list[tuple[int, bool]]:
        return [(x, True) for x in targets]


class Continuous(Scheduler):
    """Requests join and leave the running batch every step; a prompt is read whole in the step it joins."""

    name = "continuous"
    whole_prompts = True

    def admit_chunks(self, target: np.ndarray, tokens_planned: int, prefill_planned: bool) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
        # Whole prompts within the token budget; one prompt always goes if nothing else prefills,
        # so a prompt longer than the budget is not stuck forever.
        ok = target.cumsum() <= self.mbt - tokens_planned
        if not prefill_planned:
            ok[0] = True
        return target, ok

    def admit_one(self, target: int, tokens_planned: int, prefill_planned: bool) -> tuple[int, bool]:
        return target, target <= self.mbt - tokens_planned or not prefill_planned

    def admit_few(self, targets: list[int], tokens_planned: int, prefill_planned: bool) -> list[tuple[int, bool]]:
        room = self.mbt - tokens_planned
        out = [(x, c <= room) for x, c in zip(targets, itertools.accumulate(targets), strict=True)]  # (cumsum)
        if not prefill_planned:
            out[0] = (targets[0], True)
        return out


class Chunked(Scheduler):
    """Continuous batching with chunked prefill: decodes first, then prompt chunks in what budget is left."""

    name = "chunked"

    def prefill_chunks(self, remaining: np.ndarray, decodes: int) -> np.ndarray:
        # Decodes first (one token each), then prefill chunks, oldest first, in what budget is left.
        budget = max(0, self.mbt - decodes)
        start = np.cumsum(remaining) - remaining
        return np.clip(budget - start, 0, remaining)

    def admit_chunks(self, target: np.ndarray, tokens_planned: int, prefill_planned: bool) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
        budget = self.mbt - tokens_planned
        start = np.cumsum(target) - target
        chunk = np.clip(budget - start, 0, target)
        return chunk, chunk > 0

    def admit_one(self, target: int, tokens_planned: int, prefill_planned: bool) -> tuple[int, bool]:
        chunk = min(max(self.mbt - tokens_planned, 0), target)  # np.clip(budget - 0, 0, target)
        return chunk, chunk > 0

    def admit_few(self, targets: list[int], tokens_planned: int, prefill_planned: bool) -> list[tuple[int, bool]]:
        budget = self.mbt - tokens_planned
        out = []
        start = 0  # the targets before this one (np.cumsum(target) - target)
        for x in targets:
            chunk = min(max(budget - start, 0), x)  # np.clip(budget - start, 0, target)
            out.append((chunk, chunk > 0))
            start += x
        return out


POLICIES: dict[str, type[Scheduler]] = {cls.name: cls for cls in (Static, Continuous, Chunked)}


def make_scheduler(name: str, max_batch: int, max_batched_tokens: int) -> Scheduler:
    """The policy called `name` with its knobs (names are checked by the config's validation)."""
    return POLICIES[name](max_batch, max_batched_tokens)
