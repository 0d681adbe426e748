"""Engines behind one interface; see ``base.Backend`` (and ``base.BACKENDS``, the registry).

Nothing is imported here, so that reading an engine's option schema (``backends.options``)
does not load the engine interface, and the package has no import cycle."""
