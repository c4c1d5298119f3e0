"""kb.runtime: the lean query side. Imports only what each command needs."""
