"""The app's widgets, one per file. Each is a thin shell over a pure renderer in tui/render.

Stable widget ids: header, warehouse, traffic, l2, sm-grid, roofline, metrics, kvqueue, users, narration, keys,
enlarge. Scenes name parts of the floor (scenes.schema.FLOOR_PARTS); PART_WIDGETS says which widget draws each.
"""

from __future__ import annotations

# Floor part a scene step points at -> id of the widget the app outlines for it.
PART_WIDGETS: dict[str, str] = {
    "warehouse": "warehouse", "traffic": "traffic", "l2": "l2", "sm-grid": "sm-grid", "users": "users",
    "kvqueue": "kvqueue", "metrics": "metrics", "roofline": "roofline",
}


def part_widget(part: str | None) -> str | None:
    """The id of the widget that draws floor part `part` (None: nothing to outline)."""
    return PART_WIDGETS[part] if part else None
