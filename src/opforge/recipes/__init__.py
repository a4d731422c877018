"""Declarative build recipes: schema, model and loading."""
