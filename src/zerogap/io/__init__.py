"""Readers and writers of the files zerogap exchanges with users and other tools."""
