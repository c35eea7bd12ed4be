"""Replica introspection (DESIGN §6): log variants, the collector, the views over them."""
