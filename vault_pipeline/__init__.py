"""vault_pipeline: chat archives in, atomic provenance-weighted notes out, precise context back."""

__version__ = "0.1.0"
