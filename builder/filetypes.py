"""The corpus file types kb-build reads from folders, by extension. kb-build records the list in
the artifact's manifest (``file_types``), so ``kb status`` looks for new files of the same types
without knowing this policy. The corpus's own config file (kb.toml) is not content."""

from kb.formats.records import CONFIG_NAME  # noqa: F401 - ingest skips it

MARKDOWN_EXTENSIONS = frozenset({".md", ".markdown"})
TEXT_EXTENSIONS = frozenset({".txt"})
JSON_EXTENSIONS = frozenset({".json"})
YAML_EXTENSIONS = frozenset({".yaml", ".yml"})
TOML_EXTENSIONS = frozenset({".toml"})
SOURCE_EXTENSIONS = MARKDOWN_EXTENSIONS | TEXT_EXTENSIONS | JSON_EXTENSIONS | YAML_EXTENSIONS | TOML_EXTENSIONS
