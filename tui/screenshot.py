"""Export the README's screenshot: the default floor at 120x40, slow motion, a step part-way.

    python -m tui.screenshot [docs/screenshot.svg]

Deterministic (seed 0, paused, no animation, textual-dark), so re-running it after a visual change
shows the change and nothing else.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


def export(path: str = "docs/screenshot.svg", ticks: int = 150, fraction: float = 0.55, lang: str = "en") -> Path:
    """Run the app headless, step it, freeze a step `fraction` through, and save the screen as SVG."""
    from tui.app import TokensimApp
    from tui.defaults import default_config

    out = Path(path)
    app = TokensimApp(default_config(), lang=lang, autoplay=False, seed=0, speed=0.01)
    app.animation_level = "none"
    app.theme = "textual-dark"

    async def run() -> None:
        """Step, freeze, save."""
        async with app.run_test(size=(120, 40)) as pilot:
            app.advance_ticks(ticks)
            app.show_step_part(fraction)
            await pilot.pause()
            out.parent.mkdir(parents=True, exist_ok=True)
            app.save_screenshot(filename=out.name, path=str(out.parent))

    asyncio.run(run())
    return out


if __name__ == "__main__":
    print(export(*sys.argv[1:2]))
