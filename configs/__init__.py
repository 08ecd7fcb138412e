"""The shipped scenarios (`*.yaml`, found by name: `autotune search mixed`) and the published model
shapes (`models/*.json`), installed with the project as package data. Data only: nothing here is
imported besides this file, and it imports nothing; `search.scenario.CONFIG_DIR` is where they lie."""
