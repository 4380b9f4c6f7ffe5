"""Evidence: how we know the numbers are right.

The articles' claims recomputed (claims, claims_loop, claim_rows), the measured tables replayed (validate,
replay), the runtime profile fit on train rows only (fit), and each floor figure's formula filled in (explain).
"""
