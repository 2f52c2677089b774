"""The pure core: model, config, check families, evaluation, state and events — no I/O per poll.

Nothing here imports from outside ``nichealthd.core`` but the sources' facts (a fact's key and
types from its source's module, never the reader; ``tests/test_layout.py``); the only file
it reads is the config file, at start and on reload.
"""
