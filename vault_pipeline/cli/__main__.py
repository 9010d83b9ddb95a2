"""``python -m vault_pipeline.cli``: the same as the ``vault`` command."""

from vault_pipeline.cli import main

main()
