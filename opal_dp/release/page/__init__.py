"""The public page of a release (``index.html``): rendering, catalogue entry, charts and map."""
