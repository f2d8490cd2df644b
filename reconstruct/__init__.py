"""The attack: relaxed datasets, differentiable queries, RAP and RAP-Rank; sees published statistics only."""
