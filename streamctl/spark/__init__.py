"""The Spark engine: choosing it, generating standalone PySpark jobs, and running them.

Nothing here imports pyspark at module level: the CLI imports these modules to
decide and to emit jobs, and only the generated job (run in its own process)
or a test that execs a job body imports pyspark.
"""
