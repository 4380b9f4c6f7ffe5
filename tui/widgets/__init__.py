"""The app's widgets, one per file. Each is a thin shell over a pure renderer in tui/render.

Stable widget ids (scenes highlight them by id): header, warehouse, traffic, l2, sm-grid, roofline,
metrics, kvqueue, users, narration, keys, enlarge.
"""
