"""Pure renderers: a Frame (plus a width) in, Rich Text rows out. No Textual, no state, no physics."""
