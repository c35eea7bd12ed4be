"""Shared plumbing of every Loupe service: settings, logging, plugins, transport, lifecycle."""
