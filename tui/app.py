"""The live factory floor: one GPU serving many users, drawn from the engine's snapshots.

One app-level timer advances simulated time by wall time x speed, steps the engine as needed and
publishes ONE immutable Frame; every widget is a pure function of that frame. The engine's step is
atomic, so in slow motion the view interpolates inside the last step: progress =
(view clock - step start) / step time, and the state panels show the state from before that step
until the view clock reaches its end.

Stable widget ids (for tests and scenes): header, fleet, warehouse, traffic, l2, sm-grid, roofline, xray, metrics,
kvqueue, users, narration, keys, enlarge.

A fleet (`fleet=FleetSpec(...)` with more than one replica, or P/D): #fleet shows a row per replica, and
tab / 1-9 / a click show one replica's own floor (the same panels, fed from that replica's engine); 0 goes
back to the overview. `apply_setup(spec)` rebuilds the app on an Engine or a Fleet (engine.fleet.fleet.engine_for).

Hooks for the scenes engineer:
- `narration: tuple[str, ...] | None` (reactive): lines shown in the bottom #narration panel; None hides it.
- `highlight: str | None` (reactive): the id of one widget to outline (e.g. "l2"); None clears it.
- `advance_ticks(n)`, `advance_time(sim_s)`, `show_step_part(fraction)`, `set_speed(x)`, `set_playing(b)`,
  `set_users(n)`, `set_lang(lang)`, `apply_config(config)`, `frame` (the last published Frame), `engine`.
- A `FramePublished` message is posted to the app after every frame; `before_frame()` is called just
  before each frame is built (override it to refresh what the frame carries, as the scene player does).
- `playback` (tui.playback.Playback): the view's clock over the simulator's atomic steps, and the app's one
  handle on it: `sim` (an Engine or a Fleet), `config`, `fleet_spec`, `engine` (shown) and `fleet` read it.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Static

from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet.fleet import Fleet, FleetSpec, engine_for
from tui.defaults import default_config
from tui.fleet_playback import playback_for
from tui.frame import Frame, build_frame
from tui.i18n import EN, LANGS, default_lang, t
from tui.keys import KEYS, palette_rows
from tui.messages import FramePublished, ReplicaPicked
from tui.playback import Playback
from tui.screens.explain import ExplainScreen, figure_at_click
from tui.screens.help import HelpScreen
from tui.screens.picker import PickerScreen
from tui.widgets.fleet_panel import FleetPanel
from tui.widgets.header_bar import HeaderBar
from tui.widgets.key_bar import KeyBar
from tui.widgets.kvqueue import KvQueue
from tui.widgets.l2_shelf import L2Shelf
from tui.widgets.metrics import Metrics
from tui.widgets.narration import Narration
from tui.widgets.panel import FramePanel
from tui.widgets.roofline import Roofline
from tui.widgets.sm_grid import SmGrid
from tui.widgets.traffic import Traffic
from tui.widgets.users_list import UsersList
from tui.widgets.warehouse import Warehouse
from tui.widgets.xray_bar import XRayBar

if TYPE_CHECKING:
    from engine.serving.engine import Engine
    from engine.simulator import Simulator

# Simulated seconds per wall second: slow motion (a 8 ms step takes seconds to cross) to fast-forward.
SPEEDS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0,
                             100.0)
# What + and - step through: small counts one by one, then roughly x1.5 per press.
USER_LADDER: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
                                1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
# The ladder's top is the ceiling of +: past ~16k users a frame's engine work outgrows the frame budget
# and the users list cannot show them; `tokensim run` takes more.
FPS = 30
MIN_SIZE = (80, 24)  # below this the floor is replaced by a note asking for a bigger terminal
COMPACT_BELOW = (110, 34)  # below this the floor drops borders and the roofline
# Rows the floor keeps besides the guide: header + keys, the panels (#top), and the users list's title
# and two rows (boxed: plus its border). The guide gets what is left, so it never hides the users.
FLOOR_ROWS = {False: 2 + 22 + 4, True: 2 + 13 + 3}
WELCOME_S = 30.0  # wall seconds the first frame's offer of the tour stays (issue #31: a newcomer starts here)
NARRATION_MAX = 12  # the guide's rows at most (a boxed guide counts its border)
FLEET_STRIP_MAX = 10  # rows of #fleet above a replica's users list (boxed, full layout only)
# Actions that exist only with a fleet on screen: elsewhere their keys do what they did (tab moves focus).
FLEET_ACTIONS = frozenset(k.action.partition("(")[0] for k in KEYS if k.fleet)
STEP_BUDGET_S = 0.012  # wall seconds per frame the engine may use before the view falls behind
MAX_WALL_DT = 0.25  # a stalled frame (e.g. a suspended terminal) never jumps further than this


class TokensimApp(App[None]):
    """The simulator. `autoplay=False` and explicit `advance_ticks` make it deterministic for tests."""

    CSS_PATH = "app.tcss"
    TITLE = "tokensim"
    # Built from the one key table (tui.keys), as the palette, the help screen and the footer are.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(k.keys, k.action, EN.get(k.bar) or EN.get(k.help) or k.action, show=bool(k.bar), priority=k.priority)
        for k in KEYS
    ]

    narration: reactive[tuple[str, ...] | None] = reactive(None, init=False)
    highlight: reactive[str | None] = reactive(None, init=False)

    def __init__(self, config: EngineConfig | None = None, lang: str | None = None, autoplay: bool = True,
                 seed: int | None = None, speed: float = 1.0, narration: tuple[str, ...] | None = None,
                 highlight: str | None = None, engine: Engine | None = None, fleet: FleetSpec | None = None,
                 welcome: bool = False) -> None:
        """Build the engine (or the fleet) now, so a configuration that does not fit fails before the screen opens.
        `welcome`: the first frame's guide offers the tour (`tokensim` with no command), for WELCOME_S seconds."""
        super().__init__()
        cfg = config or default_config()
        if seed is not None:
            cfg = replace(cfg, seed=seed)
        if lang is not None and lang not in LANGS:
            raise InputError(f"--lang must be one of {', '.join(LANGS)}, got {lang!r}")
        self.lang = lang or default_lang()
        self.speed = float(speed)
        self.playing = autoplay
        spec = replace(fleet, config=cfg) if fleet is not None else FleetSpec(cfg)
        # The one handle on the simulator: the view clock over it (playback.sim: one Engine or a Fleet).
        self.playback: Playback = playback_for(engine if engine is not None else engine_for(spec, preroute=False))
        self.welcome = welcome and narration is None
        self.set_reactive(TokensimApp.narration, (_welcome(self.lang),) if self.welcome else narration)
        self.set_reactive(TokensimApp.highlight, highlight)
        self._timer: Timer | None = None
        self._last_wall: float | None = None
        self.frame: Frame = self._build_frame()
        self._panels: list[FramePanel | UsersList | Narration] = []  # everything that shows a frame
        self._floor_screen: Screen[Any] | None = None
        self.explained = "step"  # the figure `e` opens (the one last explained)

    # ---- layout ------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        """The floor: header, the two columns of panels, the users list, narration, keys; the too-small note."""
        with Vertical(id="floor"):
            yield HeaderBar(id="header")
            yield FleetPanel(id="fleet")
            with Horizontal(id="top"):
                with Vertical(id="left"):
                    yield Warehouse(id="warehouse")
                    yield Traffic(id="traffic")
                    yield L2Shelf(id="l2")
                    yield SmGrid(id="sm-grid")
                with Vertical(id="right"):
                    yield Roofline(id="roofline")
                    yield XRayBar(id="xray")
                    yield Metrics(id="metrics")
                    yield KvQueue(id="kvqueue")
            yield UsersList(id="users")
            yield Narration(id="narration")
            yield KeyBar(id="keys")
        yield Static("", id="enlarge")

    def on_mount(self) -> None:
        # The floor lives on the default screen: keep handles, since self.query() searches whichever
        # screen is on top (the help or a picker) and would miss them.
        """Find the panels, fit the layout to the terminal, start the (paused unless autoplay) timer, draw."""
        floor = self.screen_stack[0]
        self._floor_screen = floor
        self._panels = [*floor.query(FramePanel), floor.query_one(UsersList), floor.query_one(Narration)]
        floor.query_one(Narration).display = bool(self.narration)
        if self.highlight:
            self._set_highlight(None, self.highlight)
        self._fit_to(self.size.width, self.size.height)
        self._timer = self.set_interval(1 / FPS, self._on_timer, pause=not self.playing)
        if self.welcome:
            self.set_timer(WELCOME_S, self.end_welcome)
        self._publish()
        # All built so far lives as long as the app: keep it out of the collector's full sweeps, which otherwise
        # walk it every few hundred frames (a 30-40 ms frame in the render bench). Undone on unmount.
        gc.freeze()

    def on_unmount(self) -> None:
        """Hand the objects frozen at mount back to the collector (tests run many apps in one process)."""
        gc.unfreeze()

    def on_resize(self, event: events.Resize) -> None:
        """Re-pick the layout (full, compact, or the enlarge note) for the new terminal size."""
        self._fit_to(event.size.width, event.size.height)

    def _fit_to(self, width: int, height: int) -> None:
        """Pick the layout for a terminal size: full, compact, or the 'please enlarge' note."""
        if self._floor_screen is None:
            return
        floor = self._floor_screen.query_one("#floor")
        note = self._floor_screen.query_one("#enlarge", Static)
        small = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        floor.display = not small
        note.display = small
        if small:
            note.update(t(self.lang, "too_small", w=MIN_SIZE[0], h=MIN_SIZE[1], cw=width, ch=height))
        compact = width < COMPACT_BELOW[0] or height < COMPACT_BELOW[1]
        floor.set_class(compact, "-compact")
        self._fit_fleet(compact)
        guide = self._floor_screen.query_one(Narration)
        guide.styles.max_height = max(3, min(NARRATION_MAX, height - FLOOR_ROWS[compact]))

    def _fit_fleet(self, compact: bool) -> None:
        """A fleet: the overview fills the floor; a replica's floor keeps a strip of replica rows when there is room."""
        if self._floor_screen is None:
            return
        floor = self._floor_screen.query_one("#floor")
        panel = self._floor_screen.query_one(FleetPanel)
        fleet = self.fleet
        overview = fleet is not None and self.selected is None
        floor.set_class(overview, "-overview")
        panel.display = fleet is not None and (overview or not compact)
        if fleet is not None:
            panel.styles.height = "1fr" if overview else min(FLEET_STRIP_MAX, len(fleet.reps) + 3)

    # ---- the simulator ---------------------------------------------------------------------------
    # Everything below reads the one handle, self.playback: what runs, how it is set up, what is shown.
    @property
    def sim(self) -> Simulator:
        """What runs: one Engine or a Fleet (engine.simulator.Simulator)."""
        return self.playback.sim

    @property
    def config(self) -> EngineConfig:
        """The running configuration (one engine's live one, knobs included; a fleet's per-replica one)."""
        return self.sim.config

    @property
    def fleet_spec(self) -> FleetSpec:
        """The running deployment: the configuration and the replicas, router and P/D around it."""
        return self.sim.spec

    @property
    def engine(self) -> Engine:
        """The engine whose floor is shown (a fleet: the selected replica's, replica 1's on the overview)."""
        return self.playback.engine

    @property
    def fleet(self) -> Fleet | None:
        """The fleet on screen, or None for one engine."""
        return self.playback.fleet

    @property
    def selected(self) -> int | None:
        """The replica whose floor is shown (None: one engine, or a fleet's overview)."""
        return self.playback.selected

    def select_replica(self, index: int | None) -> None:
        """Show replica `index`'s floor (0-based; None: the fleet's overview). Ignored without a fleet."""
        if self.fleet is None or (index is not None and not 0 <= index < len(self.fleet.reps)):
            return
        self.playback.select(index)
        self._fit_to(self.size.width, self.size.height)
        self._publish()

    def apply_setup(self, spec: FleetSpec) -> bool:
        """Rebuild on the simulator `spec` describes: one Engine, or a Fleet (replicas, router, P/D), at t = 0.

        The settings screen's entry point; on bad input keep what runs and say why (returns False)."""
        if self.fleet is None and spec.replicas == 1 and spec.pd is None:
            return self.apply_config(spec.config)  # one engine stays the same object (scenes hold it)
        try:
            sim = engine_for(spec, preroute=False)
        except InputError as e:
            self.notify(str(e), severity="error", timeout=6)
            return False
        self.playback = playback_for(sim, self.selected)  # a knob or a reset keeps the replica in view
        if self._floor_screen is not None:
            self._fit_to(self.size.width, self.size.height)
        self._resync()
        return True

    # ---- the clock ---------------------------------------------------------------------------
    def _on_timer(self) -> None:
        """One animation frame: advance simulated time by wall time x speed, then publish."""
        now = time.monotonic()
        dt = 1 / FPS if self._last_wall is None else min(MAX_WALL_DT, now - self._last_wall)
        self._last_wall = now
        self.playback.advance(dt * self.speed, budget_s=STEP_BUDGET_S, speed=self._replay_speed())
        self._publish()

    def _replay_speed(self) -> float | None:
        """The speed steps too fast to watch are replayed against (None: a static frame never replays)."""
        return self.speed if self.animation_level != "none" else None

    def _build_frame(self) -> Frame:
        """The Frame for the view clock: the live step part-way through, or a fast step replayed time-dilated."""
        pb = self.playback
        v = pb.step_view()
        return build_frame(
            v.snapshot, step=v.step, step_tick=v.step_tick, progress=v.progress,
            clock_s=pb.view_clock, speed=self.speed, playing=self.playing, lang=self.lang,
            animate=self.animation_level != "none", steps_in_frame=pb.steps_in_frame, rate=self.config.rate,
            behind=pb.behind, narration=self.narration, highlight=self.highlight, dilation=v.dilation, batch=v.batch,
            fleet=pb.view(),
        )

    def before_frame(self) -> None:
        """Hook, called just before each frame is built: subclasses refresh what the frame carries.

        (The scene player keeps its narration's live figures current here.)
        """

    def _publish(self) -> None:
        """Build one frame and hand it to every widget inside one batch update."""
        self.before_frame()
        self.frame = self._build_frame()
        if not self._panels:
            return
        with self.batch_update():
            for view in self._panels:
                view.show(self.frame)
        self.post_message(FramePublished(self.frame))

    def _resync(self) -> None:
        """After the engine changed under us (reset, new knob): show its state as of now."""
        self.playback.resync()
        self._publish()

    # ---- public API (tests, scenes) ----------------------------------------------------------
    def show_engine(self) -> None:
        """The engine moved under the app (a scene's director stepped it): show its state and last step."""
        self.playback.resync(last_step=True)
        self._publish()

    def advance_ticks(self, n: int = 1) -> None:
        """Step the engine exactly n ticks and show the state after the last one."""
        self.playback.ticks(n)
        self._publish()

    def advance_time(self, sim_s: float) -> None:
        """Advance the view clock by sim_s simulated seconds (stepping as needed), as playing would."""
        self.playback.advance(sim_s, speed=self._replay_speed())
        self._publish()

    def show_step_part(self, fraction: float) -> None:
        """Run one more step and show it `fraction` of the way through (slow motion, frozen)."""
        self.playback.part(fraction)
        self._publish()

    def set_speed(self, speed: float) -> None:
        """Simulated seconds per wall second (any positive value; [ and ] move along SPEEDS)."""
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.speed = float(speed)
        self.playback.retime(self.speed)
        self._publish()

    def set_playing(self, playing: bool) -> None:
        """Start or stop the clock."""
        self.playing = playing
        self._last_wall = None
        if self._timer is not None:
            (self._timer.resume if playing else self._timer.pause)()
        self._publish()

    def set_users(self, n: int) -> None:
        """Closed-loop user count."""
        n = max(1, int(n))
        if self.fleet is not None:
            self._restart_fleet(users=n)
            return
        self.engine.set_users(n)  # the engine's config follows
        self._resync()

    def end_welcome(self) -> None:
        """Hand the welcome's rows back to the users list."""
        if self.welcome:
            self.welcome = False
            self.narration = None

    def set_lang(self, lang: str) -> None:
        """Switch the labels to 'en' or 'zh'."""
        if lang not in LANGS:
            raise ValueError(f"lang must be one of {LANGS}")
        self.lang = lang
        if self.welcome:
            self.narration = (_welcome(lang),)
        self._fit_to(self.size.width, self.size.height)
        self._publish()

    def apply_config(self, config: EngineConfig) -> bool:
        """Rebuild the engine (or the fleet) for a new configuration; on bad input keep the old one and say why."""
        if self.fleet is not None:
            return self.apply_setup(replace(self.fleet_spec, config=config))
        try:
            self.engine.reset(config)
        except InputError as e:
            self.notify(str(e), severity="error", timeout=6)
            return False
        self._resync()
        return True

    # ---- actions (keys) ----------------------------------------------------------------------
    def action_toggle_play(self) -> None:
        """space: play or pause."""
        self.set_playing(not self.playing)

    def action_step_once(self) -> None:
        """n: pause (if playing) and run exactly one engine step (a fleet: one step of the replica shown)."""
        if self.playing:
            self.set_playing(False)
        if self.selected is not None:  # a fleet's replica: its next step (an idle one may take none)
            if not self.playback.part(1.0):
                self.notify(t(self.lang, "f_idle", i=self.selected + 1), timeout=4)
            self._publish()
            return
        self.advance_ticks(1)

    def action_slower(self) -> None:
        """[: the next slower speed on SPEEDS."""
        i = bisect.bisect_left(SPEEDS, self.speed * (1 - 1e-9))
        self.set_speed(SPEEDS[max(0, i - 1)])

    def action_faster(self) -> None:
        """]: the next faster speed on SPEEDS."""
        i = bisect.bisect_right(SPEEDS, self.speed * (1 + 1e-9))
        self.set_speed(SPEEDS[min(len(SPEEDS) - 1, i)])

    def action_more_users(self) -> None:
        """+: the next user count up USER_LADDER, which ends at what the floor can keep live (MAX_USERS)."""
        if self.config.users >= USER_LADDER[-1]:
            self.notify(t(self.lang, "max_users", n=USER_LADDER[-1]), timeout=4)
            return
        i = bisect.bisect_right(USER_LADDER, self.config.users)
        self.set_users(USER_LADDER[min(len(USER_LADDER) - 1, i)])

    def action_fewer_users(self) -> None:
        """-: the next user count down USER_LADDER (at least 1)."""
        i = bisect.bisect_left(USER_LADDER, self.config.users)
        self.set_users(USER_LADDER[max(0, i - 1)])

    def _restart_fleet(self, **changes: Any) -> None:
        """A fleet takes a new setting by starting over (its replicas share one workload): say so."""
        if self.apply_config(replace(self.config, **changes)):
            self.notify(t(self.lang, "f_restart"), timeout=4)

    def _knob(self, **changes: Any) -> None:
        """Apply a what-if knob to the running engine (no restart) and remember it in the config."""
        if self.fleet is not None:
            self._restart_fleet(**changes)
            return
        if "compute_mult" in changes:
            self.engine.set_compute_mult(changes["compute_mult"])
        if "bandwidth_mult" in changes:
            self.engine.set_bandwidth_mult(changes["bandwidth_mult"])
        if "weight_dtype" in changes:
            try:
                self.engine.set_weight_dtype(changes["weight_dtype"])
            except InputError as e:
                self.notify(str(e), severity="error", timeout=6)
                return
        self._resync()  # the engine's setters keep its config

    def action_compute(self) -> None:
        """c: toggle compute x2."""
        self._knob(compute_mult=1.0 if self.config.compute_mult != 1.0 else 2.0)

    def action_bandwidth(self) -> None:
        """b: toggle HBM bandwidth x2."""
        self._knob(bandwidth_mult=1.0 if self.config.bandwidth_mult != 1.0 else 2.0)

    def action_fp8(self) -> None:
        """f: toggle fp8 weights (back to the model's own dtype)."""
        self._knob(weight_dtype=None if self.config.weight_dtype == "fp8" else "fp8")

    def action_pick_model(self) -> None:
        """m: pick a model preset; the engine restarts with it."""
        self._pick("model")

    def action_pick_gpu(self) -> None:
        """h: pick a GPU preset; the engine restarts with it."""
        self._pick("hardware")

    def _pick(self, kind: str) -> None:
        """Open the picker for 'model' or 'hardware' and apply the choice (a misfit says why and offers its fix)."""
        from tui.presets import hardware_choices, model_choices

        if kind == "model":
            choices, current = model_choices(self.config), self.config.model
        else:
            choices, current = hardware_choices(self.config), self.config.hardware

        def chosen(picked: tuple[str, dict[str, Any]] | None) -> None:
            """Picker callback: rebuild on a new choice (with the fix it needed, e.g. tp 4, when confirmed)."""
            if picked and (picked[0] != current or picked[1]):
                self.apply_config(replace(self.config, **{kind: picked[0]}, **picked[1]))

        self.push_screen(PickerScreen(kind, choices, current, self.lang), chosen)

    def action_settings(self) -> None:
        """o: every option of `tokensim run` as a form; Apply restarts the run with them (as r does)."""
        from tui.screens.settings import SettingsScreen

        def applied(spec: FleetSpec | None) -> None:
            """Settings callback: None is Cancel (nothing changes)."""
            if spec is not None:
                self.apply_setup(spec)

        self.push_screen(SettingsScreen(self.fleet_spec, self.lang), applied)

    def action_reset(self) -> None:
        """r: restart the run at t = 0 with the current settings."""
        self.apply_config(self.config)

    def action_toggle_lang(self) -> None:
        """l: English <-> 中文."""
        self.set_lang("en" if self.lang == "zh" else "zh")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The fleet's keys act only with a fleet on the floor; otherwise the key goes where it went before."""
        if action in FLEET_ACTIONS:
            return self.fleet is not None and self.screen is self._floor_screen
        if action == "explain" and self.fleet is not None and self.selected is None:
            return False  # a floor figure's formula: the overview shows no floor (pick a replica first)
        return True

    def action_select_replica(self, key: int) -> None:
        """1-9: replica 1-9's floor; 0: the fleet's overview."""
        self.select_replica(None if key == 0 else key - 1)

    def action_next_replica(self, step: int = 1) -> None:
        """tab: the next replica's floor (after the last, the overview; from the overview, replica 1)."""
        if self.fleet is None:
            return
        n = len(self.fleet.reps)
        pos = n if self.selected is None else self.selected  # the overview sits after the last replica
        pos = (pos + step) % (n + 1)
        self.select_replica(None if pos == n else pos)

    def action_prev_replica(self) -> None:
        """shift+tab: the previous replica's floor (before replica 1, the overview)."""
        self.action_next_replica(-1)

    def on_replica_picked(self, message: ReplicaPicked) -> None:
        """A click on a row of the fleet panel: that replica's floor."""
        self.select_replica(message.index)

    def action_redraw(self) -> None:
        """ctrl+l: repaint every cell of the terminal (as shells do), e.g. after another program wrote on it."""
        self.refresh()

    def action_explain(self, figure: str | None = None) -> None:
        """e: the formula of a floor figure with its values (the last one explained; a click passes its own)."""
        from engine.evidence.explain import explain_figure
        from engine.numbers import sig
        from engine.serving.accounting import ROLLING_SAMPLES
        from scenes.words import render

        def explain(name: str) -> tuple[Any, str]:
            """The figure's explanation from the latest frame, and the sim clock it shows."""
            f = self.frame
            split = getattr(self.engine, "latency_split", None)
            x = render(explain_figure(name, f.snapshot, f.step, split(ROLLING_SAMPLES) if split else None,
                                      self.config.price_per_hour), self.lang)
            return x, f"{sig(f.clock_s, 4)} s"

        def closed(last: str | None) -> None:
            """Remember the figure last shown for the next `e`."""
            if last:
                self.explained = last

        if isinstance(self.screen, ExplainScreen):
            return
        self.push_screen(ExplainScreen(figure or self.explained, explain, self.lang), closed)

    def on_click(self, event: events.Click) -> None:
        """A click on a figure of the floor opens its explanation."""
        if self.screen is self._floor_screen and (fig := figure_at_click(event)) is not None:
            self.action_explain(fig)

    def action_guide_scroll(self, direction: int) -> None:
        """↑ / ↓: scroll the guide a line when its text is taller than the rows it has (80x24)."""
        if self._floor_screen is not None:
            guide = self._floor_screen.query_one(Narration)
            (guide.scroll_down if direction > 0 else guide.scroll_up)(animate=False)

    def action_help(self) -> None:
        """?: the help screen."""
        self.push_screen(HelpScreen(self.lang, fleet=self.fleet is not None))

    # ---- scene hooks -------------------------------------------------------------------------
    def watch_narration(self, value: tuple[str, ...] | None) -> None:
        """Show or hide the #narration panel and redraw it."""
        if self._panels:
            self._floor_screen.query_one(Narration).display = bool(value)
            self._publish()

    def watch_highlight(self, old: str | None, new: str | None) -> None:
        """Move the -highlight class to the newly named widget."""
        if self._panels:
            self._set_highlight(old, new)
            self._publish()

    def _set_highlight(self, old: str | None, new: str | None) -> None:
        """Take the highlight off widget `old` and put it on widget `new` (ids; None for none)."""
        for wid, on in ((old, False), (new, True)):
            if wid:
                for w in self._floor_screen.query(f"#{wid}"):
                    w.set_class(on, "-highlight")

    # ---- command palette -----------------------------------------------------------------------
    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every key's action in the palette (ctrl+p), in the current language, then Textual's own."""
        lang = self.lang
        for k in palette_rows(fleet=self.fleet is not None):
            # The description says what it does and which key does it, so the palette teaches the keys.
            run = partial(self.run_action, k.action)
            yield SystemCommand(t(lang, k.palette), f"{k.shown} · {t(lang, k.help)}", run)
        yield from super().get_system_commands(screen)


def _welcome(lang: str) -> str:
    """The first frame's offer of the tour, with the number of scenes it plays (one per file in scenes/data)."""
    from scenes.schema import shipped_files

    return t(lang, "welcome", scenes=len(shipped_files()))
