"""Analysis of scored runs: the scorecard (``score``) and what is built from it. Torch-free."""
