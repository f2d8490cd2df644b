"""Error types shared by every censusrecon package."""


class CensusReconError(ValueError):
    """A value given to censusrecon is invalid; the message names it and what would be valid."""


class DomainError(CensusReconError):
    """An attribute, domain or coded value is invalid."""


class GeographyError(CensusReconError):
    """A geography level or unit is invalid."""


class ConfigError(CensusReconError):
    """A config file or override is invalid; the message names the key (raised by the schema, and by the code it
    configures where a setting is found wrong only when used, as the audit's)."""
