"""The opening configuration of the app (kept free of Textual so the CLI can read it cheaply)."""

from __future__ import annotations

from engine.config import EngineConfig


def default_config() -> EngineConfig:
    """generic-14b on an H100 SXM, six people chatting: short prompts and answers, a pause between questions.

    Small enough to read every row, busy enough that something is always happening: prefills, streaming
    answers, users thinking, the batch size changing from step to step.
    """
    return EngineConfig(hardware="h100-sxm", model="generic-14b", users=6, prompt="uniform:100,400",
                        output="uniform:80,240", think_time="exp:2", seed=0)
