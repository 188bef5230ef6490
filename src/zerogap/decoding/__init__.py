"""Decoding interventions: pure-torch batched cores plus thin adapters.

``railcap`` and ``blocking`` import torch only; ``hf`` holds the transformers ``LogitsProcessor``
adapters and is imported only by code that uses them.
"""
