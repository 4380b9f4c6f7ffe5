"""Fleets: several replicas on one clock behind a router, prefill/decode split, and `plan`'s grid search."""
