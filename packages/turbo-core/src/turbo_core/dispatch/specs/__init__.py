"""Typed specs of every primitive, one module per family; importing a module defines its primitives.
``turbo_core.dispatch.catalog`` imports them all and is what lookups go through."""
