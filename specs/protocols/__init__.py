"""The built-in protocols, one TOML file each, loaded by name."""
