"""The check families: each one a pure function of its state slice, the snapshot and the config."""
