"""Long offline jobs: locating shortcut neurons (``neurons``)."""
