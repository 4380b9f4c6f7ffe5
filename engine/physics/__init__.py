"""Physics: what one forward pass costs on one GPU group, from bytes moved and FLOPs done.

specs (hardware and model files, HF configs), step (the step model and its Roof), calibration (runtime
profiles), xray (a step's time split by what it waited on), speculative decoding, vLLM's KV-pool rule,
token economics.
"""
