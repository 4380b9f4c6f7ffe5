"""tokensim's engine: pure simulation of LLM serving (numpy and the standard library only; never the UI).

Reading guide. Read these three first:
  1. physics/step.py   what one forward pass costs: bytes moved and FLOPs done, one roofline per kernel group
                        (its `Roof` is the one place peak FLOP/s, bandwidth and the ridge are derived); it prices
                        a batch record (physics/batch.py) with one call, StepModel.price.
  2. serving/lane.py   one GPU group's serving loop: admit, plan, price, apply and account a step (the step
                        kinds that build and apply each batch are serving/steps.py; quiet decode runs, and the
                        stretches of a saturated batch or a busy open loop, serving/saturated.py and open_loop.py,
                        take many steps at once with the same figures).
  3. serving/engine.py the facade the CLI, the scenes and the app drive: one clock, snapshot(), metrics().

The groups:
  physics/   one step's cost (hardware and model specs, the step model, runtime profiles, x-ray)
  traffic/   where requests come from (RequestSource: arrival processes, workload stages, traces, think time),
             feeding one engine or a fleet alike
  serving/   the serving loop (tables, scheduler policies, lanes, accounting, prefix cache, snapshot)
  fleet/     replicas behind a router, prefill/decode split, and `plan`'s grid search
  evidence/  the articles' claims, the measured tables replayed, the profile fit, each figure explained

Extension points (each a small interface and a registry): scheduler policies (serving/scheduler.py POLICIES),
routers (fleet/routers.py ROUTERS; the recipe is docs/extending/routers.md), autoscaling policies
(fleet/autoscale.py POLICIES), step kinds (serving/steps.py STEP_KINDS; recipe in docs/extending/step-kinds.md),
result formats (evidence/measured/formats.py), options (options.py OPTIONS; recipe in docs/extending/options.md).

Invariants, by name (checked by `Lane.check` under --debug and by the tests):
  request conservation   every accepted request is queued, running, preempted, done or aborted (its client
                         left); the counts add up.
  KV conservation        cached + free + used blocks = the pool.
  clock monotone         a lane's clock never goes back, and a step stays resolvable in float64.
"""
