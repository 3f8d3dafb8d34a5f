"""The protocols shipped with qkbench (TOML files; see qkbench.protocol)."""
