"""Shared test helpers: fakes of the outside services, real rows and notes built from the real types, paths."""
