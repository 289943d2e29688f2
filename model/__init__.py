"""The cowcheck model: what a scenario, a protocol and a state are, and how one
action changes a state. Pure data and pure functions; no search lives here."""
