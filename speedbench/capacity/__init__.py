"""SLA capacity: the highest load each configuration sustains within an SLO set (``speedbench capacity``)."""
