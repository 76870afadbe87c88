"""The one `Settings`, and how each value is read from the environment and `.env`."""
