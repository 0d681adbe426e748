"""Cost model, hardware table, model shapes, planner, round explainer and microbenchmarks: everything modelled rather than measured."""
