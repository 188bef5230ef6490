"""The study's reading side: tables, figures and the report (never imports torch), and the
study runner (:mod:`zerogap.analysis.evaluate`, whose sampling side does)."""
