"""The paper's study (arXiv 2608.07341 §5): what it runs and how it runs it.

:mod:`zerogap.study.spec` holds the study's one config (settings, sweep, strategies, sampling
and scoring fields) and its TOML file; :mod:`zerogap.study.run` runs a study and writes its
record, through one module per concern (settings, sweep, plan, job and kinds, sampling, jobs,
executor, workers, neurons, checks, allocation, progress: its docstring lists them);
:mod:`zerogap.study.demo` is ``zerogap demo``'s study on the laptop preset's models. The package
sits above :mod:`zerogap.runs` and below the command line; :mod:`zerogap.analysis` only reads
what it writes.
"""
