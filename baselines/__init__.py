"""Comparators that never see Q(D): the holdout split and geographic hierarchy priors."""
