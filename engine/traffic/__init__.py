"""Traffic: where requests come from and what they send.

Length and gap distributions (workload), workload files with stages, recorded traces, and the arrival
processes (closed-loop users with think time, Poisson arrivals) that feed one engine or a fleet.
"""
