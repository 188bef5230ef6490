"""Baseline settings published for GSM8K, carried to a task whose solutions are shorter or longer.

LNE-blocking's ``T_task`` (positions blocked) and TED's ``tau`` (token edits tolerated) are
counts of tokens fixed for GSM8K-length answers (docs/baselines.md §1-2). On a task whose
reference solutions average ``W`` words, zerogap keeps GSM8K's share of a solution:

    value(W) = max(minimum, round(gsm8k_value * W / 54.8)),

54.8 being the mean length in words of GSM8K test's 1,319 solutions as the prompt renders them
(:func:`zerogap.tasks.prompt.cot_solution`). Words stand in for tokens: the tokenizer's words
per token cancel where both tasks are English prose with numbers. Torch-free.
"""

from __future__ import annotations

GSM8K_SOLUTION_WORDS = 54.8  # mean words of GSM8K test's solutions, rendered by cot_solution


def length_scaled(gsm8k_value: int, solution_words: float, *, minimum: int) -> int:
    """``gsm8k_value`` scaled by ``solution_words`` against GSM8K's 54.8, at least ``minimum``.

    Examples
    --------
    >>> length_scaled(7, 54.8, minimum=1), length_scaled(7, 16.2, minimum=1)
    (7, 2)
    >>> length_scaled(2, 16.2, minimum=0), length_scaled(2, 10.0, minimum=0)
    (1, 0)
    """
    if solution_words < 0:
        raise ValueError(f"solution length must be >= 0 words, got {solution_words}")
    return max(minimum, round(gsm8k_value * solution_words / GSM8K_SOLUTION_WORDS))
