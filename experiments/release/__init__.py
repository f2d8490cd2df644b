"""The release evaluation an agency runs before publishing, in one place.

- ``publish``: every mechanism's single publishing path (what is attacked, audited and published);
- ``topdown``: TopDown over the census hierarchy (tree from the public unit list, MDF);
- ``audit``: the empirical ε audit of those publishing paths;
- ``evaluate``: release → attack → compare with baselines, per ε (``censusrecon evaluate-release``);
- ``report``: the verdict, tables and plots of an evaluation; ``risks``: anonymeter's measures.

Modules import one way: publish ← topdown ← audit ← evaluate, and report and risks stand alone.
"""
