"""The SQL store: SQLAlchemy 2 models, engine bootstrap, repositories, and Alembic migrations shipped in the
package (``gpufleet db upgrade`` works from an installed wheel)."""
