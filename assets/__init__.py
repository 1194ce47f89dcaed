"""Dagster assets, one module per stage; thin wrappers over warehouse/ and stretto/."""
