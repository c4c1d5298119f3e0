"""kb.formats: the one definition of the artifact, shared by builder and runtime."""
