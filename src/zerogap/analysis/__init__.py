"""The reading side: the scorecard (``score``), the study's tables, figures, design checks,
findings and report. It never imports torch, the engine, runs or the study runner
(:mod:`zerogap.study`), which writes what this package reads: a report can be rebuilt from a
study folder alone."""
