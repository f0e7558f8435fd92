"""Types, enums, schemas and constants. No I/O; imports nothing else from jobyard."""
