"""The only package that talks to PostgreSQL: pool, embedded server, migrations, named SQL."""
