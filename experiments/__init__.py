"""The only layer that sees both truth and attack output: configs, runner, metrics, results, plots, CLI."""
