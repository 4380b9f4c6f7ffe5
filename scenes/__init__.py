"""Guided scenes: one TOML file per scene in scenes/data, played by a pure director against the live engine.

A scene file (scenes/data/NN-<id>.toml, played in NN order):

    id = "compute-x2"                                   # lowercase slug, matches the file name
    title = { en = "...", zh = "..." }
    summary = { en = "...", zh = "..." }

    [setup]                                             # any EngineConfig field, plus:
    hardware = "h100-sxm"                               #   speed: sim seconds per wall second in the app
    model = "generic-14b"                               #   probe_batch, probe_context, probe_prompt: the step
    users = 1                                           #   the step-model metrics price
    speed = 0.05

    [[steps]]
    highlight = "sm-grid"                               # a floor part (schema.FLOOR_PARTS): warehouse traffic l2 ...
    actions = [{ run_ticks = 3 }, { mark = "before" }]  # applied on entering the step (scenes.actions)
    key = true                                          # the scene's key moment (default: the last step)
    narration.en = '''Busy {sm_busy_pct:.1f} % ... {step_ms@before:.2f} ... {prefill_ms/before:.2f}x'''
    narration.zh = '''...'''

    [[steps.checkpoints]]
    claim = "C08"                                       # C01..C26 (CLAIMS.md)
    metric = "step_ms"                                  # a name in scenes.metrics.METRICS
    vs_mark = "before"                                  # optional: compare now / value at the mark
    op = "approx"                                       # approx (needs tolerance) > >= < <= == (text metrics)
    expected = 1.0
    tolerance = { abs = 0.01 }                          # or { rel = 0.05 }: a fraction of expected

    [steps.question]                                    # optional, not on step 1: asked before the step runs
    metric = "step_ms/before"                           # the engine's figure picks the nearest choice (scenes.quiz);
    ask = { en = "...{step_ms:.2f}...", zh = "..." }    #   or answer = 2 (1-based) for a question with no figure
    choices = [{ value = 1.0, en = "...", zh = "..." }, { value = 0.5, en = "...", zh = "..." }]   # 2 to 4
    explain = { en = "{step_ms/before:.2f}x ...", zh = "..." }   # shown with the verdict once the step has run

Setup may also name a workload file of scenes/workloads (`workload = "shared-system-prompt"`), a bundled trace
(`trace = "azure-conv-sample"`, `trace_speed`), prefix caching and speculative decoding (`spec_tokens`, ...).
A fleet is an action: `{ run_fleet = { replicas = 4, router = "least-loaded", pd = "1:3" } }` serves the scene's
open-loop traffic on engine.fleet.fleet to its end, headless, and its figures (fleet_*) read that run until the next.

Placeholders in narration name metrics ({metric:fmt}), a metric's value at a mark ({metric@mark}) or now
over then ({metric/mark}); they are filled from the live engine, so the text always shows its figures.
"""
