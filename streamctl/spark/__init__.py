"""The Spark engine: choosing it, generating standalone PySpark jobs, and running them.

The job modules (replay_job, window_job, join_job) and jobentry are what a
generated job runs; a job file carries them whole (jobgen). Only the job
modules import pyspark, and only a job (in its own process) or a test imports
them: the CLI imports the other modules here to decide and to emit jobs.
"""
