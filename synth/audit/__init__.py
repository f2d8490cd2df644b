"""The audit's room: whether the code that publishes keeps the ε it declares, measured on neighbours of the real data.

Its modules, each importing the domain, the tables' definitions and the statistics here, never ``experiments``:

- :mod:`~censusrecon.synth.audit.statistics`: the tests and bounds every family reads (Clopper–Pearson bound on ε,
  noise scale, shape, tail and independence checks, :class:`~censusrecon.synth.audit.statistics.AuditResult`);
- :mod:`~censusrecon.synth.audit.yardstick`: each measurement's sensitivity and the budget a declared ε allows,
  derived from the relation and the tables' definitions alone (it reads nothing of the code that publishes);
- :mod:`~censusrecon.synth.audit.spending`: the synthesizers' spending ledger and its checks.

This file imports nothing, so that the yardstick can be loaded without the code it measures.
"""
