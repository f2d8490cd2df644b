"""The defence: DP mechanisms with declared relation and privacy unit, noise backends, ledger, histograms, releases, auditor."""
