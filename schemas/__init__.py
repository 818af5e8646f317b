"""Pydantic v2 models of every wire shape in the contract (frozen, extra="forbid")."""
