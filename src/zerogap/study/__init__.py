"""The paper's study (arXiv 2608.07341 §5): what it runs and how it runs it.

:mod:`zerogap.study.spec` holds the study's one config (settings, sweep, strategies, sampling and
scoring fields) and its TOML file; :mod:`zerogap.study.run` plans the runs (shared where they can
be), samples them, locates shortcut neurons, measures the design checks and hands the folder to
:mod:`zerogap.analysis.report`; :mod:`zerogap.study.demo` is ``zerogap demo``'s study on the
laptop preset's models. The package sits above :mod:`zerogap.runs` and below the command
line; :mod:`zerogap.analysis` only reads what it writes.
"""
