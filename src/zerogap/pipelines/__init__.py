"""Long offline jobs: locating shortcut neurons (``neurons``) and building clean and
contaminated models (``contamination``)."""
