"""Fixed colours for the floor, picked to read on dark and light themes alike."""

from __future__ import annotations

WEIGHTS = "#e5a50a"
KV_USED = "#c061cb"
KV_FREE = "#7a4a80"
RESERVE = "#77767b"
FREE = "#77767b"
PACKET = "#62a0ea"
L2 = "#33d17a"
SM_LIT = "#f6d32d"
WEIGHTS_HOT = "bold #fff7c2 on #c64600"  # the weights of the layer being read: crates leaving the warehouse
KV_READ = "bold #ffffff on #813d9c"  # a user's KV cache being read with the layer
ACTS = "#62a0ea"  # activations: the step's intermediate results, written and read back
DROP = "bold #33d17a"  # the token a step drops into an answer
DROP_BG = "#33d17a"  # the same green as a fill: the x-ray's multi-LoRA kernels
SM_IDLE = "#5e5c64"
DIM = "#8a8a8a"
LABEL = "bold"
MEMORY = "#62a0ea"
COMPUTE = "#f66151"
POINT = "bold #f6d32d"

PHASE = {
    0: "#c0bfbc",  # queued
    1: "#62a0ea",  # prefill
    2: "#c061cb",  # thinking
    3: "#33d17a",  # decoding
    4: "#8a8a8a",  # done
    5: "#f66151",  # preempted
}
