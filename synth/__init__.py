"""The defence (differentially private releases); empty until the DP-release issue lands."""
