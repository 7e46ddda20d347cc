"""What every product's published files share, whatever the product: the date as it is written in file names and
rows (``YYYYMMDD``), and the error a check of a published file raises."""

import re

DATE = re.compile(r"\d{8}")


class PublishedFormatError(ValueError):
    """A published file does not match its published format."""
