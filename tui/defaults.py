"""The opening configuration of the app (kept free of Textual so the CLI can read it cheaply)."""

from __future__ import annotations

from engine.config import EngineConfig


def default_config() -> EngineConfig:
    """generic-14b on an H100 SXM, six people chatting: each prompt carries its conversation so far
    (500-3,000 tokens), answers of 80-400 tokens, a pause between questions.

    Small enough to read every row, busy enough that something is always happening: prefills, streaming
    answers, users thinking, the batch size changing from step to step. Prompts as long as a chat's history
    make the load knob teach: about 128 users (+ ten times) fill the KV pool and start preempting, and
    past the batch cap a queue forms, within seconds of simulated time.
    """
    return EngineConfig(hardware="h100-sxm", model="generic-14b", users=6, prompt="uniform:500,3000",
                        output="uniform:80,400", think_time="exp:2", seed=0)
