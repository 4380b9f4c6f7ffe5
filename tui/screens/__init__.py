"""Modal screens over the floor: the help screen and the preset picker."""
