"""The built-in protocols and the shipped scenarios, as data: cowcheck looks
built-in protocols up by name in specs/protocols (cowcheck.specs.protocols)."""
