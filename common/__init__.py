"""What kb-build and kb share besides the artifact format: error bases and exit codes
(errors.py), click's one-line usage errors (usage.py), typed settings (settings.py), a search's and a get's
inputs (options.py) and torch-free model conversion (convert.py)."""
