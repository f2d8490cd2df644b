"""Release programs under censusrecon's program contract (synth.program_host), each a small
self-contained module: it imports nothing of censusrecon, so it runs in an environment of its own
(``command``) as well as in censusrecon's (``function``)."""
