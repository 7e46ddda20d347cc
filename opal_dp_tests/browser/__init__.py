"""Browser tests: a real Chromium (Playwright) against ``dagster dev`` on a throwaway instance."""
