"""Traffic: where requests come from and what they send.

Length and gap distributions (workload), workload files with stages, recorded traces, and the arrival
processes (closed-loop users with think time, Poisson arrivals), put together as a RequestSource (source.py)
that feeds one engine's lanes or a whole fleet alike.
"""
