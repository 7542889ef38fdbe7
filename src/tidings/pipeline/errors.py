"""The pipeline's one exception, under :class:`tidings.errors.TidingsError`."""

from __future__ import annotations

from ..errors import TidingsError

__all__ = ["PipelineError"]


class PipelineError(TidingsError):
    """A pipeline job cannot run. ``code`` is stable, the message is for people.

    Codes: ``java_missing`` (no Java for a local Spark), ``spark_missing`` (PySpark is not
    installed), ``store_not_found`` (no
    ``tidings.db`` at the data dir), ``archive_busy`` (another archive job holds the
    archive's lock), ``invalid_option`` (a data source option is malformed).

    Writes (:mod:`tidings.pipeline.sink`; the message starts with the code, since Spark
    hands the driver only the text): ``write_refused`` (the broker refused rows),
    ``write_unauthorized`` (401/403: the token may not publish), ``write_failed`` (any
    other request error), ``broker_unavailable`` and ``broker_busy`` (still no answer,
    or still ``Busy``, after the retries).
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
