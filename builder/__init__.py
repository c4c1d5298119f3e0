"""kb.builder: corpus -> one artifact. Never imported by the runtime."""
