"""Package and artifact format versions (kept apart, as tantivy does)."""

KB_VERSION = "0.1.0"
