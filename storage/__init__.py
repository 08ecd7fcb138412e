"""Storage: SQLAlchemy tables beside Optuna's, and the queries the tuner and report use."""
