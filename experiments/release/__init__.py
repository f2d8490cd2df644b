"""The release evaluation an agency runs before publishing, orchestrated here; what publishes, audits and reads
releases lives in ``synth`` (``release_path``, ``topdown_release``, ``program_host``, ``release_files``, ``audit``).

- ``evaluate``: release → attack → compare with baselines, per ε (``censusrecon evaluate-release``);
- ``audit``: the audit run from a study (its door, :class:`~experiments.release.audit.StudySource`, and its jobs);
- ``files``: a config's units laid out for release files; ``program``: the environments a config's programs need;
- ``decision``: PUBLISH, DO NOT PUBLISH or CANNOT DECIDE, once; ``words``: the words they share;
- ``release_report``, ``release_privacy``, ``release_bureau``, ``release_plots``: the report and its pictures;
- ``risks`` and ``anonymeter_worker``: anonymeter's measures, in its own environment.

Modules import one way (tests/test_layering.py's RELEASE_ORDER): words ← decision ← release_report ← evaluate.
"""
