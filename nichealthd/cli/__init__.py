"""``nichealthctl``, the client: commands and their formatting."""
