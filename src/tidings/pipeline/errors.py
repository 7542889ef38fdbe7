"""The pipeline's one exception, under :class:`tidings.errors.TidingsError`."""

from __future__ import annotations

from ..errors import TidingsError

__all__ = ["PipelineError"]


class PipelineError(TidingsError):
    """A pipeline job cannot run. ``code`` is stable, the message is for people.

    Codes: ``java_missing`` (no Java for a local Spark), ``spark_missing`` (PySpark is not
    installed), ``store_not_found`` (no
    ``tidings.db`` at the data dir, or no ``events`` table at a PostgreSQL address),
    ``store_unreachable`` (a PostgreSQL address that cannot be connected to: down, wrong
    host, port, database, user or password), ``store_error`` (PostgreSQL refused a
    statement), ``driver_missing`` (a PostgreSQL address without the ADBC PostgreSQL
    driver), ``archive_busy`` (another archive job holds the
    archive's lock), ``invalid_option`` (a data source option is malformed);
    for ``archive --master``: ``master_unreachable`` (no standalone master answers),
    ``executor_import`` (the executors cannot import tidings), ``archive_task_failed``
    (any other failure of the staging job). Messages show
    a PostgreSQL address without its password.

    Writes (:mod:`tidings.pipeline.sink`; the message starts with the code, since Spark
    hands the driver only the text): ``write_refused`` (the broker refused rows),
    ``write_unauthorized`` (401/403: the token may not publish), ``write_failed`` (any
    other request error), ``broker_unavailable`` and ``broker_busy`` (still no answer,
    or still ``Busy``, after the retries).
    """

    def __init__(self, message: str, *, code: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint
        """What to do, when it differs from the code's usual hint (:data:`HINTS`)."""

    def line(self) -> str:
        """One line for a person: the code first, what to do last (``store_not_found: ...; give ...``)."""
        text = self.message.removeprefix(f"{self.code}: ")
        hint = self.hint or HINTS.get(self.code)
        if hint and hint not in text:
            text = f"{text.rstrip('.')}; {hint}"
        return f"{self.code}: {text}"


HINTS: dict[str, str] = {
    "store_not_found": "give --data-dir the folder holding the server's tidings.db",
    "store_unreachable": "check the address (host, port, database, user, password) and that PostgreSQL runs",
    "archive_busy": "wait for the running archive job to finish (its lock is released when it exits)",
    "invalid_option": "correct the option (docs/pipeline.md lists them)",
    "connect_missing": "pip install 'tidings[connect]'",
    "data_loss": "restart the query from an offset the log still holds, or set failOnDataLoss=false",
}
"""What to do, per code, appended to a message that does not already say it (the messages of
the other codes end with it themselves)."""
