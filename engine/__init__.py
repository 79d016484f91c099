"""LoaderLab engine: workloads, loaders, modes, measurement, the DuckDB store and the CLI. Never imports streamlit."""
