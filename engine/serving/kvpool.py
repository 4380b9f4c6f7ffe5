"""The KV pool of one lane: 16-token blocks, private to a request or (with prefix caching) shared and cached.

The pool itself is engine.serving.prefix_cache.BlockPool: with caching off every block is private and counted;
with it on, full blocks are keyed by their content, shared with a reference count, and kept in an LRU
once no request holds them (used + cached + free = pool). A request's `blocks` column counts every
block it holds and its `full` column how many of them are keyed.
"""

from __future__ import annotations

from engine.serving.prefix_cache import BlockPool as KVPool

__all__ = ["KVPool"]
