"""Exporters: memscope's live state in the formats other tools read (one module per format)."""
