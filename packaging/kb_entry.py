"""Frozen entry point (PyInstaller script, see kb.spec): the same ``run()`` as the console
script; its start-up tweaks are documented in runtime/entry.py."""

from kb.runtime.entry import run

run()
