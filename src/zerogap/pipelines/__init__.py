"""Long offline jobs that produce inputs for evaluation (contaminated models)."""
