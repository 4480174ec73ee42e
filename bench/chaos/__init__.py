"""Chaos checker: faults injected into a replica group under load, then every
acknowledged message accounted for (docs/chaos.md)."""
