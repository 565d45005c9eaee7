"""Broker services beside the log: coordinators and caches, started in dependency order."""

from __future__ import annotations


def start_services(broker) -> None:
    """Create the coordinators a broker owns (groups, producer ids, fetch sessions)."""
    return None
