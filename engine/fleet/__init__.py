"""Fleets: several replicas on one clock behind a router, prefill/decode split, and `plan`'s grid search.

    fleet     the Fleet: one request source, replicas, a router, the run loops, fleet-wide metrics
    replica   one replica: an Engine with no traffic of its own, fed and stepped by the fleet
    routers   the routers (a RoutingSnapshot in, a Pick out) and their registry, ROUTERS
    pd        prefill/decode disaggregation: KV copies from prefill to decode replicas over a link
    plan      the grid search: a pure evaluate(point) mapped over a grid, typed PointResults
    pool      mapping jobs over a local process pool (plan's grid, a dealt fleet's replicas)
    plan_ray  the same map on Ray
"""
