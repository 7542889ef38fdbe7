"""tidings: an event distribution service (ICRC-72 pub-sub and friends)."""

__version__ = "0.1.0"
