"""Scheduler.admit_one and admit_few (the chunk rule on plain ints) against admit_chunks on arrays."""

from __future__ import annotations

import itertools

import numpy as np

from engine.serving.scheduler import POLICIES, Scheduler


class _Toy(Scheduler):
    """A policy without its own admit_one: the base class's asks admit_chunks."""

    name = "toy"

    def admit_chunks(self, target: np.ndarray, tokens_planned: int, prefill_planned: bool) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
        chunk = np.minimum(target, 100)
        return chunk, chunk + tokens_planned <= self.mbt


def test_admit_one_matches_admit_chunks() -> None:
    """Every policy's admit_one gives admit_chunks' chunk and fit, over budgets tight, exact and loose."""
    for cls in (*POLICIES.values(), _Toy):
        for mbt, target, planned, pf in itertools.product((1, 512, 2048, 8192), (1, 15, 16, 17, 500, 2048, 9000),
                                                          (0, 1, 255, 511, 2048, 8191, 10000), (False, True)):
            s = cls(256, mbt)
            chunk, ok = s.admit_chunks(np.array([target], dtype=np.int64), planned, pf)
            one = s.admit_one(target, planned, pf)
            assert one == (int(chunk[0]), bool(ok[0])), (cls.name, mbt, target, planned, pf)
            assert type(one[0]) is int and type(one[1]) is bool


def test_admit_few_matches_admit_chunks() -> None:
    """Every policy's admit_few gives admit_chunks' chunks and fits for a few candidates, budgets tight to loose."""
    rng = np.random.default_rng(3)
    for cls in (*POLICIES.values(), _Toy):
        for _ in range(400):
            mbt = int(rng.choice([1, 64, 512, 2048, 8192]))
            s = cls(256, mbt)
            targets = rng.integers(1, 3000, size=int(rng.integers(1, 9))).tolist()
            planned, pf = int(rng.integers(0, 9000)), bool(rng.integers(0, 2))
            chunk, ok = s.admit_chunks(np.array(targets, dtype=np.int64), planned, pf)
            got = s.admit_few(targets, planned, pf)
            assert got == list(zip(chunk.tolist(), ok.tolist(), strict=True)), (cls.name, mbt, targets, planned, pf)
            assert all(type(c) is int and type(f) is bool for c, f in got)
