"""Engines behind one interface; see ``base.Backend`` and ``registry`` (one entry per backend:
its class, options schema and capabilities). Nothing is imported here, so that reading the
registry does not load the engine interface, and the package has no import cycle."""
