"""The reading side: the scorecard (``score``), the study's tables, figures and report (never
import torch), and the study runner (:mod:`zerogap.analysis.evaluate`, whose sampling side does)."""
