"""The operator dashboard: Jinja pages served by the API process."""
