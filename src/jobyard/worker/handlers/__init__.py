"""Built-in job handlers shipped with jobyard (http_request, ...)."""
