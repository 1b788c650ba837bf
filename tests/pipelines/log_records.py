"""The records a logger passes on, for tests of what reaches the log."""

import logging


class RecordsOf(logging.Handler):
    """The messages a logger passes to its handlers (after its filters), until closed."""

    def __init__(self, name: str):
        super().__init__(logging.DEBUG)
        self.logger, self.messages = logging.getLogger(name), []
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def close(self) -> None:
        self.logger.removeHandler(self)
        super().close()
