"""The exit statuses of the `censusrecon` command, defined once: the command returns them, a release
evaluation's decision maps onto them (:meth:`experiments.release.decision.Decision.exit_status`), and the CLI's
epilog and the user guide say them (tests/test_docs.py checks the guide against :data:`EXIT_STATUSES`)."""

EXIT_DONE = EXIT_PUBLISH = 0  # done; for evaluate-release, PUBLISH every mechanism at the settings its line names
EXIT_ERROR = 1  # an unexpected error
EXIT_BAD_INPUT = 2  # bad input: config, file, argument
EXIT_UNDECIDED = EXIT_CANNOT_DECIDE = 3  # CANNOT DECIDE a mechanism, or an audit inconclusive
EXIT_AUDIT_FAILED = 4  # an audit of the publishing code failed: do not publish with it
EXIT_DO_NOT_PUBLISH = 5  # DO NOT PUBLISH a mechanism
EXIT_INTERRUPTED = 130  # interrupted: rerun to resume

EXIT_STATUSES = (f"exit status: {EXIT_DONE} done (evaluate-release: PUBLISH, every mechanism at the settings its line "
                 f"names); {EXIT_ERROR} unexpected error; {EXIT_BAD_INPUT} bad input (config, file, argument); "
                 f"{EXIT_UNDECIDED} evaluate-release CANNOT DECIDE a mechanism (the terminal says what would decide "
                 "it), or an audit inconclusive (a check could not run: not shown to keep its ε); "
                 f"{EXIT_AUDIT_FAILED} an audit failed: do not publish with that code; {EXIT_DO_NOT_PUBLISH} "
                 "evaluate-release decided DO NOT PUBLISH for a mechanism (a backend not for publication, not DP, or "
                 f"shown above the tolerance); {EXIT_INTERRUPTED} interrupted (rerun to resume)")
