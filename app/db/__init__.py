"""The database: models, repositories (all the SQL), engines for SQLite and Postgres, migrations."""
